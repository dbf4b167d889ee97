"""The failure stage runs two tests at a time (`pytest -n 2 -m "not serial"`), then the tests
marked `serial` one at a time (`pytest -m serial`): those whose time bounds are seconds from
an event (a kill, a stop, an op's submission), which a second job's load on the machine's
few cores could push past. Every other time bound is measured from the job's own start (its
workers' 'started at' lines, _scenario_run.since_job_start) or from an event, with room for
a loaded machine."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: a time bound tight enough that the test runs alone, not beside "
                   "another (the failure stage's second pytest call, -m serial)")
