"""The spawn side of the sandbox: the client's pool of supervisors, the spawn server, the
wire between them, and starting, capturing and stopping a child's whole process tree."""
