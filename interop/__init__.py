"""interop: the imperative shell of functional-ws (torch façade, JAX handoff).

It holds a :class:`functional_ws.WorkspaceState` and the device buffers, carries out the
growth the pure core plans, and hands out typed views.
"""
