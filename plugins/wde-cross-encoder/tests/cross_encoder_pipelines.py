"""Pipelines of wde-cross-encoder's workflows with no model family installed: a plugin defined here links HF's
``BertForSequenceClassification`` through ``cross_encoder_links``, as a family does, and wde assembles the pipeline
from a real HF directory (its config and tokenizer; assembly loads no weights and no model class). The tests then
run the stages that come before and after the model: input processor, pair tokenizer, output processors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from wde_core.plugin_api import assemble_pipeline, hookimpl
from wde_cross_encoder import plugin as cross_encoder_plugin
from wde_cross_encoder.public import cross_encoder_links
from wde_plugin_kit import plugin_host

ARCHITECTURE = "BertForSequenceClassification"
UNLOADED_MODEL = "cross_encoder_pipelines:NO_MODEL_CLASS"  # assembly never imports a link's model


class SequenceClassifierFamily:
    """A family plugin for these tests: HF's BERT sequence classifiers on wde-cross-encoder's two variants."""

    @hookimpl
    def wde_register_architectures(self, register):
        """The ``single-logit`` (rerank) and ``several-labels`` (classify) links of ``ARCHITECTURE``."""
        for link in cross_encoder_links(ARCHITECTURE, UNLOADED_MODEL, "BERT cross-encoder, {variant} ({task})"):
            register(link)


def assemble(directory: Path, **engine_args):
    """The pipeline wde assembles for ``directory`` with only the core, wde-cross-encoder and the family above."""
    with plugin_host(cross_encoder_plugin, ("test-bert-classifiers", SequenceClassifierFamily()),
                     use_entry_points=False) as host:
        return assemble_pipeline(str(directory), host=host, device="cpu", **engine_args)


def stage(pipeline, name: str):
    """The pipeline's ``name`` stage (``input_processor``, ``tokenizer``, ``output_processor``), built for it."""
    return pipeline.components[name].load()(pipeline)


def with_config(source: Path, target: Path, **changes) -> Path:
    """A copy of the model directory ``source`` at ``target`` whose config.json has ``changes`` (``None`` drops)."""
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    config = {key: value for key, value in config.items() if value is not None}
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target
