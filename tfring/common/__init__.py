"""Names Horovod users import from `horovod.common` (its exceptions), at the same place."""
