"""The spawn side of the sandbox: the typed messages of the wire, the client's pool of
supervisors, the spawn server, starting, capturing and stopping a command's whole process
tree, and the warm worker that Python calls run under."""
