"""Elastic training (tfring.elastic is its public face): the job (job.py: run, its limits, the
reset after a lost worker or a change of hosts), the states kept across a reset (state.py),
who the workers are and how new ones join (members.py), how a worker's process ends
(process_end.py), and the environment variables tfringrun sets for it (environment.py,
standard library only: tfringrun loads it by path).

May import: tfring._training and what it may, tfring._init. Not tfring.keras (its Keras
callbacks are tfring.keras.elastic) and never tfringrun: their contract is the environment."""
