"""How the sandbox's services run: the one :class:`~sandbox.services.backend.Sandbox` protocol
and its implementations. :mod:`~sandbox.services.local` supervises Kafka, MinIO and the Spark
cluster as processes of this machine (what each one runs is
:mod:`~sandbox.services.local_processes`); :mod:`~sandbox.services.compose` runs them as a
Docker Compose stack; :mod:`~sandbox.services.inside_compose` is that stack seen from inside
its own network (JupyterLab), where :mod:`~sandbox.services.fault_service`, the one container
that holds the Docker socket, kills, pauses and restarts services on a notebook's behalf.
"""
