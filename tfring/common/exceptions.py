"""The exceptions of elastic training, where Horovod's users import them from
(`from horovod.common.exceptions import HorovodInternalError` becomes
`from tfring.common.exceptions import HorovodInternalError`); `tfring.elastic` and
`tfring.keras.elastic` export the same classes."""


class HorovodInternalError(RuntimeError):
    """A collective failed because a worker was lost: `run` rolls back to the last commit."""


class HostsUpdatedInterrupt(RuntimeError):
    """The set of workers changed: `run` re-forms the job and synchronizes the state."""

    def __init__(self, skip_sync=False):
        super().__init__("the workers of the job changed")
        self.skip_sync = skip_sync
