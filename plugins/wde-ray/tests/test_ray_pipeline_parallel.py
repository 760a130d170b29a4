"""pipeline_parallel as a per-replica engine argument on a real local Ray: an actor's engine runs its own two stage
processes and embeds a dataset as ``Engine.encode`` does. Run by ``nox -s ray``."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("wde_ray")  # the other sessions collect this file too: skip before Ray-only imports
ray = pytest.importorskip("ray")

import wde_ray  # noqa: E402

from wde_plugin_kit.corpus import wiki_paragraphs  # noqa: E402
from wde_plugin_kit.encoders import save_random_bert  # noqa: E402
from wde_core import Engine  # noqa: E402

pytestmark = pytest.mark.ray


def test_an_actor_serves_its_engine_from_two_pipeline_stages(tmp_path):
    directory = save_random_bert(tmp_path / "bert", seed=1, st_files=True)
    texts = wiki_paragraphs(64)
    with Engine(str(directory), device="cpu") as engine:
        expected = engine.encode(texts)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        rows = ray.data.from_items([{"id": f"p{i}", "text": text} for i, text in enumerate(texts)])
        out = wde_ray.embed(rows, str(directory), workers=1, num_cpus=1, executor="pipeline_parallel",
                            pipeline_parallel_size=2, max_num_batched_tokens=256).take_all()
    finally:
        ray.shutdown()
    assert [row["id"] for row in out] == [f"p{i}" for i in range(len(texts))]
    assert np.abs(np.array([row["embedding"] for row in out]) - expected).max() <= 1e-5
