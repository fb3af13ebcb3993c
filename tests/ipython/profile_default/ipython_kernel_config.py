# Kernels started by the tests (nbval) do not forward what child processes write straight to
# the file descriptors: the Spark driver JVM prints start-up notes there at moments that do
# not line up with cells, which would make stored outputs flaky. Python-level output and
# everything a cell prints are captured as usual.
c = get_config()  # noqa: F821
c.IPKernelApp.capture_fd_output = False
