"""What the user chose for an analysis (``AnalyzeOptions``): kept apart from the stages so the
service client, which only sends options, does not import pandas and every stage to send them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AnalyzeOptions:
    """Options that change what the analysis computes (and so belong in task ids and manifests)."""

    source: str = "auto"  # auto | csv | db
    hash_sources: bool = False
    model_config: str | None = None  # a HuggingFace-style config.json (num_hidden_layers, ...)
    model_id: str | None = None  # a key of knowledge/model_catalog.yaml
    host_trace: bool = True  # label idle windows from trace_view.json (streams the whole file)
    mode: str = "fast"  # fast: summary, markdown; full: also the Perfetto trace, the Excel workbook and the HTML report
    trace: bool = False  # the Perfetto trace.json in fast mode too (a few hundred MB on a big root)
    html_single_file: bool = False  # inline the HTML report's assets (opens from file://)
    hardware_model: str | None = None  # a SoC of knowledge/hardware_profiles.yaml (or of the host's CANN)
    hardware_profile: str | None = None  # a JSON file of peaks ({"cube_tflops": {"bf16": ...}, ...})
    cann_hardware_scan: bool = True  # read peaks of the chosen SoC from this host's CANN platform_config

    _KEYS = (
        "source",
        "hash_sources",
        "model_config",
        "model_id",
        "host_trace",
        "mode",
        "trace",
        "html_single_file",
        "hardware_model",
        "hardware_profile",
        "cann_hardware_scan",
    )

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self._KEYS}

    @classmethod
    def from_dict(cls, data: dict) -> "AnalyzeOptions":
        return cls(**{k: data[k] for k in cls._KEYS if k in data})
