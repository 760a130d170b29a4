"""An example third-party wde plugin, installed in every test environment.

It adds components of its own (a lower-casing input processor, a shortest-first scheduler and an
engine-argument class), a workflow that combines them with the core's, a made-up architecture
``ExampleBagOfEmbeddings`` served by that workflow, a ``wde example-hello`` command, and two
hooks that change nothing unless asked: a pipeline observer and an opt-in attention override.
Every name it registers is its own, so installing it leaves other models untouched.
"""

__version__ = "0.1.0"
