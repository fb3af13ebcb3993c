"""The JVM and Spark client side of the sandbox: the Spark session and its settings
(:mod:`~sandbox.jvm.spark_session`), the class-data archives that start Spark's JVMs faster
(:mod:`~sandbox.jvm.class_data_sharing`, recorded by the warm-up in
:mod:`~sandbox.jvm.class_data_warmup`), and the project's own JVM classes as Java sources
(``java/``, compiled into the cache by :mod:`sandbox.artifacts` on first use).
"""
