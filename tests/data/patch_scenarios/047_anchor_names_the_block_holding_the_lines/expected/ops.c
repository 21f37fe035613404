PyObject *Keys(PyObject *d) {
    if (PyDict_CheckExact(d)) {
        return _PyDictView_New(d);
    }
    return NULL;
}

PyObject *Values(PyObject *d) {
    if (PyDict_CheckExact(d)) {
        return PyDictValues_New(d);
    }
    return NULL;
}

PyObject *Items(PyObject *d) {
    if (PyDict_CheckExact(d)) {
        return _PyDictView_New(d);
    }
    return NULL;
}
