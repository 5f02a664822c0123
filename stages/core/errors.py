"""The error a user can act on, apart from stage.py so that code run at DAG parse time (the model
settings merge the rules call) can raise it without importing the table machinery."""


class StageError(RuntimeError):
    """A stage failed for a reason the user can act on (bad input, bad param, broken invariant):
    the stage CLI prints it as one line naming what to fix, never a traceback."""
