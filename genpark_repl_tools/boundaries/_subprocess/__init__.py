"""Private machinery of the subprocess boundary: wire protocol, sandbox, zygote, worker, host side.

    _protocol  length-prefixed frames shared by the host, the zygote and the workers
    _sandbox   what the OS offers (detected once) and how a worker applies it
    _zygote    the single-threaded fork template: forks sandboxed workers, reaps them, kills trees
    _worker    the worker's main loop: the same runner as in-process, on the far side of a socket
    _host      the worker client: one per live worker, every request of a session goes through it
    _spawn     the launcher: the zygote client, starting, resuming and retiring workers
    _os        host-side OS decisions: the workers' user, the workspace root, session directories
    _claims    what describe() claims (from what the zygote detected and probed), how a worker ended

Nothing here is public API.
"""
