/* The hot path of @kernelarena.apply in C: what dispatch/apply.py's routed() wrapper does on a
 * call whose key was seen before, without a Python frame.
 *
 * FastCall stands for a decorated function. A call goes, in order:
 *   - while the site passes through (apply off), to the body;
 *   - keywords and left-out defaults made positional by a plan kept per form of call
 *     (positional count, keyword names) that Python registered (add_form);
 *   - the guard asked first (a HitSlot: the argument count it is for, its tensors' positions,
 *     torch's TensorGuards.check, and the prepared call with its "into" convention) checked on
 *     the picked tensors; if it passes, the prepared call, as dispatch/calls.py's invoke() does;
 *   - anything else (no form known, another count, the guard failed) to the Python wrapper,
 *     called with the very arguments given: it decides as if this object were not there.
 *
 * Python swaps the slot (site reset or bound again) and refills it (a guard asked first) at any
 * time: between two calls, or during one while a solution runs Python code or another thread
 * holds the GIL. So a call reads everything it needs from the slot before it calls anything, and
 * holds its own references to the check and the prepared call while they run.
 *
 * Only the CPython C API; no torch headers: torch's functions are called as Python objects.
 * Built just-in-time by dispatch/fastcall.py. Assumes the GIL (that module refuses a
 * free-threaded build).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* Calls with more arguments than this go to the Python wrapper (no definition has near this). */
#define MAX_ARGS 32
/* Forms of keyword/default call kept per function; further forms go to the Python wrapper. */
#define MAX_FORMS 8

/* ("memory_format",): the keyword of torch.empty_like's call for outputs allocated here. */
static PyObject *memory_format_kwnames;

/* -- HitSlot: the guard a call site asks first ------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;                 /* the argument count it is for; -1: none */
    Py_ssize_t picked;                /* how many tensors the check takes */
    Py_ssize_t positions[MAX_ARGS];   /* their positions among the arguments */
    PyObject *check;                  /* picked tensors -> bool */
    PyObject *call;                   /* the prepared call */
    Py_ssize_t into;                  /* calls.py: -1 result, >= 0 that argument, <= -2 allocate */
} HitSlot;

static int
slot_traverse(HitSlot *self, visitproc visit, void *arg)
{
    Py_VISIT(self->check);
    Py_VISIT(self->call);
    return 0;
}

static int
slot_clear_references(HitSlot *self)
{
    self->count = -1;
    Py_CLEAR(self->check);
    Py_CLEAR(self->call);
    return 0;
}

static void
slot_dealloc(HitSlot *self)
{
    PyObject_GC_UnTrack(self);
    slot_clear_references(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
slot_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    HitSlot *self = (HitSlot *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->count = -1;
    }
    return (PyObject *)self;
}

/* set(count, positions, check, call, into): the guard asked first from now on. */
static PyObject *
slot_set(HitSlot *self, PyObject *args)
{
    Py_ssize_t count, into;
    PyObject *positions, *check, *call;
    if (!PyArg_ParseTuple(args, "nOOOn:set", &count, &positions, &check, &call, &into)) {
        return NULL;
    }
    PyObject *sequence = PySequence_Fast(positions, "positions must be a sequence");
    if (sequence == NULL) {
        return NULL;
    }
    Py_ssize_t picked = PySequence_Fast_GET_SIZE(sequence);
    Py_ssize_t read[MAX_ARGS];
    int valid = count >= 0 && count <= MAX_ARGS && picked <= count && into < count
                && (into >= -1 || -2 - into < count);
    for (Py_ssize_t i = 0; valid && i < picked; i++) {
        read[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(sequence, i));
        valid = read[i] >= 0 && read[i] < count;
    }
    Py_DECREF(sequence);
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (!valid) {
        /* The Python wrapper takes such calls: a slot that never passes. */
        slot_clear_references(self);
        Py_RETURN_FALSE;
    }
    PyObject *old_check = self->check, *old_call = self->call;
    Py_INCREF(check);
    Py_INCREF(call);
    self->check = check;
    self->call = call;
    memcpy(self->positions, read, (size_t)picked * sizeof(Py_ssize_t));
    self->picked = picked;
    self->into = into;
    self->count = count;
    /* Released last: their destructors may run Python code that reads this slot. */
    Py_XDECREF(old_check);
    Py_XDECREF(old_call);
    Py_RETURN_TRUE;
}

static PyObject *
slot_clear(HitSlot *self, PyObject *unused)
{
    PyObject *old_check = self->check, *old_call = self->call;
    self->count = -1;
    self->check = NULL;
    self->call = NULL;
    Py_XDECREF(old_check);
    Py_XDECREF(old_call);
    Py_RETURN_NONE;
}

static PyObject *
slot_get_positions(HitSlot *self, void *closure)
{
    if (self->count < 0) {
        return PyTuple_New(0);
    }
    PyObject *positions = PyTuple_New(self->picked);
    for (Py_ssize_t i = 0; positions != NULL && i < self->picked; i++) {
        PyObject *item = PyLong_FromSsize_t(self->positions[i]);
        if (item == NULL) {
            Py_CLEAR(positions);
            break;
        }
        PyTuple_SET_ITEM(positions, i, item);
    }
    return positions;
}

static PyMethodDef slot_methods[] = {
    {"set", (PyCFunction)slot_set, METH_VARARGS,
     "set(count, positions, check, call, into) -> bool: ask this guard first; False (and the "
     "slot emptied) where the call cannot be taken here"},
    {"clear", (PyCFunction)slot_clear, METH_NOARGS, "no guard: every call goes to Python"},
    {NULL},
};

static PyMemberDef slot_members[] = {
    {"count", T_PYSSIZET, offsetof(HitSlot, count), READONLY, "argument count; -1: none"},
    {"check", T_OBJECT, offsetof(HitSlot, check), READONLY, NULL},
    {"call", T_OBJECT, offsetof(HitSlot, call), READONLY, NULL},
    {"into", T_PYSSIZET, offsetof(HitSlot, into), READONLY, NULL},
    {NULL},
};

static PyGetSetDef slot_getset[] = {
    {"positions", (getter)slot_get_positions, NULL, "the checked tensors' positions", NULL},
    {NULL},
};

static PyTypeObject HitSlotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kernelarena.dispatch._fastcall.HitSlot",
    .tp_basicsize = sizeof(HitSlot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The guard a call site asks first, read by FastCall without a Python frame.",
    .tp_new = slot_new,
    .tp_dealloc = (destructor)slot_dealloc,
    .tp_traverse = (traverseproc)slot_traverse,
    .tp_clear = (inquiry)slot_clear_references,
    .tp_methods = slot_methods,
    .tp_members = slot_members,
    .tp_getset = slot_getset,
};

/* -- Forms of call: keywords and defaults as positions ----------------------------------- */

typedef struct {
    Py_ssize_t nargs;     /* positional arguments of the form */
    PyObject *kwnames;    /* its keyword names, in call order; NULL: none */
    Py_ssize_t size;      /* arguments once positional */
    /* Per position: >= 0, that slot of the vectorcall array (positionals, then keyword values);
     * < 0, defaults[-1 - source]. */
    Py_ssize_t sources[MAX_ARGS];
    PyObject *defaults;   /* tuple */
} Form;

/* -- FastCall ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;          /* functools.wraps' metadata, __kernelarena_site__ */
    PyObject *weakrefs;
    PyObject *slow;          /* the Python wrapper: every call not decided here */
    PyObject *fallback;      /* the body, called while passing through */
    PyObject *slot;          /* HitSlot of the site's current guards, or NULL */
    PyObject *empty_like;    /* torch.empty_like, set once the site is bound */
    PyObject *memory_format; /* torch.contiguous_format */
    char passthrough;
    Py_ssize_t arity;        /* calls with fewer positionals fill defaults (0: none has one) */
    int forms_known;
    Form forms[MAX_FORMS];   /* append-only until dealloc: a call may hold borrowed defaults */
} FastCall;

static const Form *
find_form(FastCall *self, Py_ssize_t nargs, PyObject *kwnames)
{
    for (int i = 0; i < self->forms_known; i++) {
        const Form *form = &self->forms[i];
        if (form->nargs != nargs) {
            continue;
        }
        if (form->kwnames == kwnames) {
            return form;
        }
        if (form->kwnames == NULL || kwnames == NULL) {
            continue;
        }
        /* Equal names from another call site: a tuple of interned strings, compared by
         * identity item by item first. */
        int equal = PyObject_RichCompareBool(form->kwnames, kwnames, Py_EQ);
        if (equal < 0) {
            PyErr_Clear();
            return NULL;
        }
        if (equal) {
            return form;
        }
    }
    return NULL;
}

/* The prepared call on the positional arguments, returning what "into" says (calls.invoke). */
static PyObject *
invoke(FastCall *self, PyObject *call, Py_ssize_t into, PyObject *const *given, Py_ssize_t count)
{
    if (into == -1) {
        return PyObject_Vectorcall(call, given, (size_t)count, NULL);
    }
    if (into >= 0) {
        PyObject *result = PyObject_Vectorcall(call, given, (size_t)count, NULL);
        if (result == NULL) {
            return NULL;
        }
        Py_DECREF(result);
        Py_INCREF(given[into]);
        return given[into];
    }
    /* A new contiguous output like the argument at -2 - into, passed last and returned. The
     * allocator is read and held here: the site sets it before any slot can pass. */
    PyObject *empty_like = self->empty_like, *memory_format = self->memory_format;
    if (empty_like == NULL || memory_format == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "kernelarena fast path: no allocator set");
        return NULL;
    }
    Py_INCREF(empty_like);
    Py_INCREF(memory_format);
    PyObject *like[2] = {given[-2 - into], memory_format};
    PyObject *out = PyObject_Vectorcall(empty_like, like, 1, memory_format_kwnames);
    Py_DECREF(empty_like);
    Py_DECREF(memory_format);
    if (out == NULL) {
        return NULL;
    }
    PyObject *with_out[MAX_ARGS + 1];
    memcpy(with_out, given, (size_t)count * sizeof(PyObject *));
    with_out[count] = out;
    PyObject *result = PyObject_Vectorcall(call, with_out, (size_t)count + 1, NULL);
    if (result == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(result);
    return out;
}

static PyObject *
fastcall_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastCall *self = (FastCall *)callable;
    if (self->passthrough) {
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *const *given = args;
    Py_ssize_t count = nargs;
    PyObject *bound[MAX_ARGS];
    PyObject *names = kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0 ? kwnames : NULL;
    if (names != NULL || nargs < self->arity) {
        const Form *form = find_form(self, nargs, names);
        if (form == NULL) {
            goto slow;
        }
        /* Borrowed: the caller's arguments, and defaults this object keeps until it dies. */
        for (Py_ssize_t i = 0; i < form->size; i++) {
            Py_ssize_t source = form->sources[i];
            bound[i] = source >= 0 ? args[source] : PyTuple_GET_ITEM(form->defaults, -1 - source);
        }
        given = bound;
        count = form->size;
    }
    HitSlot *slot = (HitSlot *)self->slot;
    if (slot == NULL || slot->count != count || count > MAX_ARGS) {
        goto slow;
    }
    /* Everything read from the slot before anything is called (see the top of the file). */
    PyObject *picked[MAX_ARGS];
    Py_ssize_t npicked = slot->picked;
    for (Py_ssize_t i = 0; i < npicked; i++) {
        picked[i] = given[slot->positions[i]];
    }
    PyObject *check = slot->check, *call = slot->call;
    Py_ssize_t into = slot->into;
    Py_INCREF(check);
    Py_INCREF(call);
    PyObject *passed = PyObject_Vectorcall(check, picked, (size_t)npicked, NULL);
    Py_DECREF(check);
    if (passed == NULL) {
        Py_DECREF(call);
        return NULL;
    }
    int hit = passed == Py_True ? 1 : passed == Py_False ? 0 : PyObject_IsTrue(passed);
    Py_DECREF(passed);
    if (hit <= 0) {
        Py_DECREF(call);
        if (hit < 0) {
            return NULL;
        }
        goto slow;
    }
    PyObject *result = invoke(self, call, into, given, count);
    Py_DECREF(call);
    return result;
slow:
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static int
fastcall_init(FastCall *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"slow", "fallback", "arity", NULL};
    PyObject *slow, *fallback;
    Py_ssize_t arity;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOn:FastCall", keywords, &slow, &fallback,
                                     &arity)) {
        return -1;
    }
    if (self->slow != NULL) {
        PyErr_SetString(PyExc_TypeError, "FastCall is initialised once");
        return -1;
    }
    Py_INCREF(slow);
    Py_INCREF(fallback);
    self->slow = slow;
    self->fallback = fallback;
    self->arity = arity;
    self->vectorcall = fastcall_vectorcall;
    return 0;
}

static PyObject *
fastcall_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    FastCall *self = (FastCall *)type->tp_alloc(type, 0);
    if (self != NULL) {
        /* Until __init__ runs, a call raises rather than reads NULL callables. */
        self->vectorcall = NULL;
    }
    return (PyObject *)self;
}

static int
fastcall_traverse(FastCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->dict);
    Py_VISIT(self->slow);
    Py_VISIT(self->fallback);
    Py_VISIT(self->slot);
    Py_VISIT(self->empty_like);
    Py_VISIT(self->memory_format);
    for (int i = 0; i < self->forms_known; i++) {
        Py_VISIT(self->forms[i].kwnames);
        Py_VISIT(self->forms[i].defaults);
    }
    return 0;
}

static int
fastcall_clear(FastCall *self)
{
    /* By the collector, when unreachable; a finalizer that still calls it gets a TypeError
     * (fastcall_call) rather than NULL callables. */
    self->vectorcall = NULL;
    Py_CLEAR(self->dict);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->slot);
    Py_CLEAR(self->empty_like);
    Py_CLEAR(self->memory_format);
    for (int i = 0; i < self->forms_known; i++) {
        Py_CLEAR(self->forms[i].kwnames);
        Py_CLEAR(self->forms[i].defaults);
    }
    self->forms_known = 0;
    return 0;
}

static void
fastcall_dealloc(FastCall *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    fastcall_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
fastcall_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    if (((FastCall *)self)->vectorcall == NULL) {
        PyErr_SetString(PyExc_TypeError, "FastCall called before __init__");
        return NULL;
    }
    return PyVectorcall_Call(self, args, kwargs);
}

/* A method when found on a class, as the Python wrapper (a function) would be. */
static PyObject *
fastcall_descr_get(PyObject *self, PyObject *instance, PyObject *owner)
{
    if (instance == NULL || instance == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, instance);
}

/* add_form(nargs, kwnames, sources, defaults) -> bool: calls of this form (positional count,
 * keyword names in call order) are made positional here from now on. */
static PyObject *
fastcall_add_form(FastCall *self, PyObject *args)
{
    Py_ssize_t nargs;
    PyObject *kwnames, *sources, *defaults;
    if (!PyArg_ParseTuple(args, "nO!O!O!:add_form", &nargs, &PyTuple_Type, &kwnames,
                          &PyTuple_Type, &sources, &PyTuple_Type, &defaults)) {
        return NULL;
    }
    PyObject *names = PyTuple_GET_SIZE(kwnames) > 0 ? kwnames : NULL;
    Py_ssize_t size = PyTuple_GET_SIZE(sources);
    if (self->forms_known == MAX_FORMS || size > MAX_ARGS || nargs < 0
        || find_form(self, nargs, names) != NULL) {
        Py_RETURN_FALSE;
    }
    Form *form = &self->forms[self->forms_known];
    Py_ssize_t slots = nargs + PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < size; i++) {
        Py_ssize_t source = PyLong_AsSsize_t(PyTuple_GET_ITEM(sources, i));
        if (source == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (source >= slots || -1 - source >= PyTuple_GET_SIZE(defaults)) {
            PyErr_Format(PyExc_ValueError, "source %zd is out of range", source);
            return NULL;
        }
        form->sources[i] = source;
    }
    Py_XINCREF(names);
    Py_INCREF(defaults);
    form->nargs = nargs;
    form->kwnames = names;
    form->size = size;
    form->defaults = defaults;
    self->forms_known++;
    Py_RETURN_TRUE;
}

static PyObject *
fastcall_get_slot(FastCall *self, void *closure)
{
    PyObject *slot = self->slot != NULL ? self->slot : Py_None;
    Py_INCREF(slot);
    return slot;
}

static int
fastcall_set_slot(FastCall *self, PyObject *value, void *closure)
{
    if (value != NULL && value != Py_None && !PyObject_TypeCheck(value, &HitSlotType)) {
        PyErr_SetString(PyExc_TypeError, "slot must be a HitSlot or None");
        return -1;
    }
    PyObject *old = self->slot;
    self->slot = value == Py_None ? NULL : value;
    Py_XINCREF(self->slot);
    Py_XDECREF(old);
    return 0;
}

static PyObject *
fastcall_get_forms(FastCall *self, void *closure)
{
    return PyLong_FromLong(self->forms_known);
}

/* Pickled by name, as functions are: the module's attribute of that qualified name. */
static PyObject *
fastcall_reduce(PyObject *self, PyObject *unused)
{
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyObject *
fastcall_repr(PyObject *self)
{
    PyObject *name = PyObject_GetAttrString(self, "__qualname__");
    if (name == NULL) {
        PyErr_Clear();
        return PyUnicode_FromFormat("<kernelarena.apply function at %p>", self);
    }
    PyObject *shown = PyUnicode_FromFormat("<kernelarena.apply function %S at %p>", name, self);
    Py_DECREF(name);
    return shown;
}

static PyMethodDef fastcall_methods[] = {
    {"add_form", (PyCFunction)fastcall_add_form, METH_VARARGS,
     "add_form(nargs, kwnames, sources, defaults) -> bool: make calls of this form positional "
     "here (sources: per position a slot of the call's arguments, positionals then keyword "
     "values, or -1 - k for defaults[k]); False where no more forms are kept"},
    {"__reduce__", (PyCFunction)fastcall_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyMemberDef fastcall_members[] = {
    {"passthrough", T_BOOL, offsetof(FastCall, passthrough), 0, "call the body directly"},
    {"empty_like", T_OBJECT, offsetof(FastCall, empty_like), 0, "torch.empty_like"},
    {"memory_format", T_OBJECT, offsetof(FastCall, memory_format), 0, "torch.contiguous_format"},
    {"arity", T_PYSSIZET, offsetof(FastCall, arity), READONLY, NULL},
    {NULL},
};

static PyGetSetDef fastcall_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"slot", (getter)fastcall_get_slot, (setter)fastcall_set_slot,
     "the HitSlot of the site's guards, or None", NULL},
    {"forms", (getter)fastcall_get_forms, NULL, "how many forms of call are kept", NULL},
    {NULL},
};

static PyTypeObject FastCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kernelarena.dispatch._fastcall.FastCall",
    .tp_basicsize = sizeof(FastCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A function decorated by kernelarena.apply, its hot path in C.",
    .tp_new = fastcall_new,
    .tp_init = (initproc)fastcall_init,
    .tp_dealloc = (destructor)fastcall_dealloc,
    .tp_traverse = (traverseproc)fastcall_traverse,
    .tp_clear = (inquiry)fastcall_clear,
    .tp_repr = fastcall_repr,
    .tp_call = fastcall_call,
    .tp_vectorcall_offset = offsetof(FastCall, vectorcall),
    .tp_descr_get = fastcall_descr_get,
    .tp_dictoffset = offsetof(FastCall, dict),
    .tp_weaklistoffset = offsetof(FastCall, weakrefs),
    .tp_getattro = PyObject_GenericGetAttr,
    .tp_setattro = PyObject_GenericSetAttr,
    .tp_methods = fastcall_methods,
    .tp_members = fastcall_members,
    .tp_getset = fastcall_getset,
};

static struct PyModuleDef fastcall_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_fastcall",
    .m_doc = "The hot path of kernelarena.apply (see dispatch/fastcall.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__fastcall(void)
{
    if (PyType_Ready(&HitSlotType) < 0 || PyType_Ready(&FastCallType) < 0) {
        return NULL;
    }
    if (memory_format_kwnames == NULL) {
        PyObject *name = PyUnicode_InternFromString("memory_format");
        memory_format_kwnames = name == NULL ? NULL : PyTuple_Pack(1, name);
        Py_XDECREF(name);
        if (memory_format_kwnames == NULL) {
            return NULL;
        }
    }
    PyObject *module = PyModule_Create(&fastcall_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "HitSlot", (PyObject *)&HitSlotType) < 0
        || PyModule_AddObjectRef(module, "FastCall", (PyObject *)&FastCallType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
