/* The guard of apply's hot path for the tensors of a key, as torch's TensorGuards (dynamo) checks
 * them, at a quarter of its cost or less: TensorGuards.check took about 60 ns a call and 60 a
 * tensor on an idle 2-core VM (a tuple of the arguments, then torch's general checks per
 * tensor), where this reads the same fields of each TensorImpl and compares them with the ones
 * recorded.
 *
 * TensorCheck(*tensors) records, per tensor: its exact Python type, its dispatch keys as the
 * thread's dispatch state (inference mode, no_grad in a custom op) adjusts them, dtype, device,
 * requires_grad, sizes and strides. check(*tensors) passes when each tensor matches its record
 * and no tensor is passed twice, as TensorGuards' check does; it is at least as strict as
 * apply's key (device, shapes and dtypes), so a pass means the same key.
 *
 * Built just-in-time by dispatch/tensorcheck.py against the torch it runs with (c10's headers,
 * linked to libc10), and refused by that module where this torch's tensors are laid out
 * otherwise: a tensor's Python object is read as THPVariable (its TensorImpl right after the
 * object header), which the constructor verifies against the tensor's own _cdata.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <c10/core/DispatchKeySet.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstring>

namespace {

/* Tensors of more dimensions are left to TensorGuards (no definition has near this many). */
constexpr int64_t kMaxDims = 12;

/* torch/csrc/autograd/python_variable.h's THPVariable, up to the tensor: verified per tensor. */
struct VariableLayout {
    PyObject_HEAD
    c10::TensorImpl *impl;
};

struct Expected {
    PyTypeObject *type;  /* strong reference */
    uint64_t keys;       /* dispatch keys, adjusted (adjusted_keys) */
    caffe2::TypeMeta dtype;
    c10::Device device;
    bool requires_grad;  /* whatever the grad mode, as TensorGuards compares it */
    int64_t dim;
    int64_t sizes[kMaxDims];
    int64_t strides[kMaxDims];
};

struct TensorCheck {
    PyObject_VAR_HEAD
    vectorcallfunc vectorcall;
    Expected expected[1];
};

/* Keys Python tensor subclasses and modes add: TensorGuards leaves them out by default. */
c10::DispatchKeySet python_keys;

uint64_t
adjusted_keys(c10::DispatchKeySet keys, const c10::impl::LocalDispatchKeySet &local)
{
    return (((keys | local.included_) - local.excluded_) - python_keys).raw_repr();
}

/* Whether ``impl`` matches ``e`` (a C++ exception, e.g. symbolic sizes, counts as no). */
bool
matches(const Expected &e, const c10::TensorImpl *impl, const c10::impl::LocalDispatchKeySet &local)
{
    if (adjusted_keys(impl->key_set(), local) != e.keys || impl->dtype() != e.dtype) {
        return false;
    }
    if (impl->device() != e.device || impl->dim() != e.dim) {
        return false;
    }
    if (impl->requires_grad() != e.requires_grad) {
        return false;
    }
    size_t bytes = (size_t)e.dim * sizeof(int64_t);
    return std::memcmp(impl->sizes().data(), e.sizes, bytes) == 0
           && std::memcmp(impl->strides().data(), e.strides, bytes) == 0;
}

PyObject *
check_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    TensorCheck *self = (TensorCheck *)callable;
    Py_ssize_t count = PyVectorcall_NARGS(nargsf);
    if (count != Py_SIZE(self) || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)) {
        PyErr_Format(PyExc_TypeError, "TensorCheck takes %zd tensors, no keywords",
                     Py_SIZE(self));
        return NULL;
    }
    const c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
    try {
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *tensor = args[i];
            const Expected &e = self->expected[i];
            if (Py_TYPE(tensor) != e.type) {
                Py_RETURN_FALSE;
            }
            for (Py_ssize_t j = 0; j < i; j++) {
                if (args[j] == tensor) {  /* TensorGuards passes no tensor twice */
                    Py_RETURN_FALSE;
                }
            }
            if (!matches(e, ((VariableLayout *)tensor)->impl, local)) {
                Py_RETURN_FALSE;
            }
        }
    } catch (...) {
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* The TensorImpl of ``tensor`` where its layout is the one assumed, else NULL with ValueError. */
c10::TensorImpl *
impl_of(PyObject *tensor)
{
    if (Py_TYPE(tensor)->tp_basicsize < (Py_ssize_t)sizeof(VariableLayout)) {
        PyErr_SetString(PyExc_ValueError, "not a tensor's layout");
        return NULL;
    }
    PyObject *cdata = PyObject_GetAttrString(tensor, "_cdata");
    if (cdata == NULL) {
        return NULL;
    }
    void *address = PyLong_AsVoidPtr(cdata);
    Py_DECREF(cdata);
    c10::TensorImpl *impl = ((VariableLayout *)tensor)->impl;
    if (address == NULL || (void *)impl != address) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "this torch lays tensors out otherwise");
        }
        return NULL;
    }
    return impl;
}

int
record(Expected *e, PyObject *tensor, const c10::impl::LocalDispatchKeySet &local)
{
    c10::TensorImpl *impl = impl_of(tensor);
    if (impl == NULL) {
        return -1;
    }
    if (impl->layout() != c10::kStrided || impl->dim() > kMaxDims) {
        PyErr_SetString(PyExc_ValueError, "only strided tensors of few dimensions are checked");
        return -1;
    }
    e->keys = adjusted_keys(impl->key_set(), local);
    e->dtype = impl->dtype();
    e->device = impl->device();
    e->requires_grad = impl->requires_grad();
    e->dim = impl->dim();
    size_t bytes = (size_t)e->dim * sizeof(int64_t);
    std::memcpy(e->sizes, impl->sizes().data(), bytes);
    std::memcpy(e->strides, impl->strides().data(), bytes);
    e->type = Py_TYPE(tensor);
    Py_INCREF(e->type);
    return 0;
}

int
record_all(TensorCheck *self, PyObject *args)
{
    const c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
    try {
        for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) {
            if (record(&self->expected[i], PyTuple_GET_ITEM(args, i), local) < 0) {
                return -1;
            }
        }
    } catch (const std::exception &error) {
        PyErr_Format(PyExc_ValueError, "cannot check this tensor: %s", error.what());
        return -1;
    }
    return 0;
}

PyObject *
check_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0) {
        PyErr_SetString(PyExc_TypeError, "TensorCheck(*tensors) takes no keywords");
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(args);
    if (count < 1) {
        PyErr_SetString(PyExc_TypeError, "TensorCheck(*tensors) needs a tensor");
        return NULL;
    }
    /* tp_alloc zeroes the items: a partly recorded check holds NULL types, released as such. */
    TensorCheck *self = (TensorCheck *)type->tp_alloc(type, count);
    if (self == NULL) {
        return NULL;
    }
    Py_SET_SIZE(self, count);
    self->vectorcall = check_vectorcall;
    if (record_all(self, args) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

int
check_traverse(TensorCheck *self, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) {
        Py_VISIT(self->expected[i].type);
    }
    return 0;
}

int
check_clear(TensorCheck *self)
{
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) {
        Py_CLEAR(self->expected[i].type);
    }
    return 0;
}

void
check_dealloc(TensorCheck *self)
{
    PyObject_GC_UnTrack(self);
    check_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyObject *
check_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return PyVectorcall_Call(self, args, kwargs);
}

PyTypeObject TensorCheckType = {PyVarObject_HEAD_INIT(NULL, 0)};

PyModuleDef tensorcheck_module = {PyModuleDef_HEAD_INIT};

}  // namespace

PyMODINIT_FUNC
PyInit__tensorcheck(void)
{
    python_keys = c10::DispatchKeySet({c10::DispatchKey::Python,
                                       c10::DispatchKey::PythonTLSSnapshot,
                                       c10::DispatchKey::PythonDispatcher});
    TensorCheckType.tp_name = "kernelarena.dispatch._tensorcheck.TensorCheck";
    TensorCheckType.tp_basicsize = sizeof(TensorCheck) - sizeof(Expected);
    TensorCheckType.tp_itemsize = sizeof(Expected);
    TensorCheckType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC
                               | Py_TPFLAGS_HAVE_VECTORCALL;
    TensorCheckType.tp_doc = "check(*tensors) -> bool: the tensors match those it was made from";
    TensorCheckType.tp_new = check_new;
    TensorCheckType.tp_dealloc = (destructor)check_dealloc;
    TensorCheckType.tp_traverse = (traverseproc)check_traverse;
    TensorCheckType.tp_clear = (inquiry)check_clear;
    TensorCheckType.tp_call = check_call;
    TensorCheckType.tp_vectorcall_offset = offsetof(TensorCheck, vectorcall);
    if (PyType_Ready(&TensorCheckType) < 0) {
        return NULL;
    }
    tensorcheck_module.m_name = "_tensorcheck";
    tensorcheck_module.m_doc = "apply's guard of a key's tensors (see dispatch/tensorcheck.py)";
    tensorcheck_module.m_size = -1;
    PyObject *module = PyModule_Create(&tensorcheck_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "TensorCheck", (PyObject *)&TensorCheckType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
