"""The core tasks' front-end methods, for ``Engine`` (they return results) and ``AsyncEngine`` (awaitables), made
from the task table (``wde_core.builtin.TASKS``): each is its prepare function's signature (less the context, plus
``show_progress``) and docstring, written once in ``wde_core/tasks``, and runs through ``self.call``. Methods of tasks
that plugins register resolve by name."""

from __future__ import annotations

from wde_core.builtin import TASKS
from wde_core.plugins.entries import import_target
from wde_core.tasks import SHOW_PROGRESS, front_end_method

TaskMethods = type("TaskMethods", (), {
    "__doc__": "``encode``, ``embed_tokens``, ``score``, ``rerank``, ``classify`` and ``classify_tokens``; "
               "``show_progress=True`` draws a progress bar on stderr (``Engine`` only).",
    "__module__": __name__,
    **{name: front_end_method(name, import_target(target), extra=(SHOW_PROGRESS,))
       for task in TASKS for name, target in task.methods.items()}})
