"""The environment variables through which tfringrun tells the workers of an elastic job
what it was asked (--min-np and the rest) and where things are, defined once for both sides.

Standard library only, and nothing of tfring's: tfringrun loads this file by path
(tfringrun/launcher.py, tfring_module), so that the launcher does not import tfring (and
TensorFlow with it), and the library does not import the launcher.
"""

MIN_NP = "TFRING_ELASTIC_MIN_NP"                  # --min-np
MAX_NP = "TFRING_ELASTIC_MAX_NP"                  # --max-np
RESET_LIMIT = "TFRING_ELASTIC_RESET_LIMIT"        # --reset-limit
TIMEOUT = "TFRING_ELASTIC_TIMEOUT"                # --elastic-timeout
START_TIMEOUT = "TFRING_ELASTIC_START_TIMEOUT"    # how long joining workers may take to start
HOSTS_FILE = "TFRING_ELASTIC_HOSTS_FILE"          # the discovery script's last answer
START_HOSTS = "TFRING_ELASTIC_START_HOSTS"        # the hosts of the first workers, in order
# The folder where each worker notes how it ended (tfringrun reads it): under MPI's fault
# tolerance mpirun says 0 even when every worker died.
STATUS_DIR = "TFRING_ELASTIC_STATUS_DIR"
FINALIZE_TIMEOUT = "TFRING_ELASTIC_FINALIZE_TIMEOUT"  # MPI_Finalize's deadline at exit
# The names tfringrun exported to the first workers (comma-separated), which an elastic job
# hands on to the workers it spawns: mpirun's -x does not reach them.
EXPORTED_LIST = "TFRING_ELASTIC_EXPORTED"
