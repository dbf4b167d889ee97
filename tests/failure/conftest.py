"""The failure stage runs two tests at a time (`pytest -n 2 -m "not serial"`); the tests
marked `serial` run one at a time (`pytest -m serial`, early in the suite, beside nothing but
the sanitizer builds at idle priority: tests/run_suite.py): those whose time bounds are seconds from
an event (a kill, a stop, an op's submission), which a second job's load on the machine's
few cores could push past. Every other time bound is measured from the job's own start (its
workers' 'started at' lines, _scenario_run.since_job_start) or from an event, with room for
a loaded machine.

Tests marked `full_only` repeat, in another flavour, what a test of the default run covers
(the same scenario on tf_keras, say); `make test-full` runs them, `make test` leaves them
out (tests/run_suite.py)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: a time bound tight enough that the test runs alone, not beside "
                   "another (the failure stage's second pytest call, -m serial)")
    config.addinivalue_line(
        "markers", "full_only: another flavour of what a default test covers; run by "
                   "`make test-full` only")
