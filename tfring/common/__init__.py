"""Names Horovod users import from `horovod.common` (its exceptions), at the same place; and
the elastic job's environment variables, which tfringrun and the library share
(elastic_environment.py, standard library only)."""
