"""The learner's side of a run, a module per role: ``base`` (the state, built once), ``sampling``,
``step`` (the gradient step, the finite check, schedules), ``results``, ``evaluation``,
``inference``, ``state`` (checkpoints), composed by ``loop``. Nothing here is algorithm-specific:
:class:`volley.algorithm.Algorithm` builds on :class:`volley.learner.loop.Learner`."""
