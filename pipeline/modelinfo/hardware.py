"""Which NPU the capture ran on and its peaks — chosen explicitly, from the capture, or left unknown.

Order: a ``--hardware-profile`` JSON, ``--hardware-model NAME``, the capture's own device name
(profiler db NPU_INFO) when it names one SoC. The numbers of a named SoC come from CANN's
``platform_config/<SoC>.ini`` when the analysis host has one (unless the scan is turned off), else from
``knowledge/hardware_profiles.yaml``. A family name alone (``Ascend910B``) leaves the variant — and
MFU — unknown unless the host's CANN holds exactly one ini of that family; that choice is reported
with the caveat that an analysis host is not proof of the capture host.
"""

from __future__ import annotations

import configparser
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from npuprof import knowledge
from npuprof.pipeline.errors import BadInput, UsageError
from npuprof.pipeline.input_files import read_input_bytes

CANN_DIR_ENV = ("NPUPROF_CANN_PLATFORM_DIR", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH")
CANN_DEFAULT_DIRS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann")
INI_GLOBS = (
    "*.ini",
    "platform_config/*.ini",
    "data/platform_config/*.ini",
    "*/data/platform_config/*.ini",
    "compiler/data/platform_config/*.ini",
)


@dataclass
class Hardware:
    """The chosen hardware: peaks (TFLOPS / GB/s) with their sources, or none when unresolved."""

    name: str | None = None
    how: str = "unresolved"  # hardware_profile | hardware_model | capture | cann_ini_only_family_match | unresolved
    cube_tflops: dict[str, float] = field(default_factory=dict)  # theoretical, by dtype
    vector_tflops: float | None = None
    hbm_gbps: float | None = None
    sustained: dict[str, float] = field(default_factory=dict)  # factors: cube.<dtype>, vector, hbm
    facts: dict[str, object] = field(default_factory=dict)  # cores, clock, memory
    sources: dict[str, str] = field(default_factory=dict)
    candidates: list[str] = field(default_factory=list)
    capture_devices: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)

    @property
    def resolved(self) -> bool:
        return bool(self.cube_tflops)

    def sustained_tflops(self, dtype: str) -> float | None:
        peak = self.cube_tflops.get(dtype)
        factor = self.sustained.get(f"cube.{dtype}")
        return peak * factor if peak is not None and factor is not None else None


def _profiles() -> dict:
    return knowledge.load("hardware_profiles")


def _canonical(name: str) -> str | None:
    """The profile key of a SoC name or alias (case-insensitive), None when unknown."""
    wanted = name.strip().lower()
    for key, entry in _profiles()["profiles"].items():
        if key.lower() == wanted or wanted in (a.lower() for a in entry.get("aliases", [])):
            return key
    return None


def _family(name: str) -> list[str]:
    for family, members in _profiles()["families"].items():
        if family.lower() == name.strip().lower():
            return list(members)
    return []


def cube_peak_tflops(cores: int, freq_mhz: float, mkn: list[int]) -> float:
    """cores × clock × M·N·K MACs × 2 FLOPs, in TFLOPS."""
    return cores * freq_mhz * 1e6 * mkn[0] * mkn[1] * mkn[2] * 2 / 1e12


def _from_numbers(hw: Hardware, numbers: dict, source: str) -> None:
    """Fill peaks from cores / clock / lanes (a knowledge profile or a parsed ini)."""
    mkn = {**_profiles()["dtype_mkn"], **numbers.get("dtype_mkn", {})}
    for dtype, dims in mkn.items():
        hw.cube_tflops[dtype] = cube_peak_tflops(numbers["cube_core_count"], numbers["cube_freq_mhz"], dims)
    if numbers.get("vector_core_count") and numbers.get("vector_lanes"):
        hw.vector_tflops = (
            numbers["vector_core_count"] * numbers["cube_freq_mhz"] * 1e6 * numbers["vector_lanes"] / 1e12
        )
    hw.facts.update({k: numbers.get(k) for k in ("cube_core_count", "vector_core_count", "cube_freq_mhz", "hbm_gib")})
    hw.sources["cube_tflops"] = f"cube_core_count × cube_freq_mhz × M·N·K × 2, from {source}"
    hw.sources["vector_tflops"] = f"vector_core_count × clock × vector_lanes (one op per lane), from {source}"


def _sustained(hw: Hardware) -> None:
    factors = _profiles()["sustained_factors"]
    hw.sustained = {f"cube.{k}": v for k, v in factors["cube"].items()}
    hw.sustained.update({"vector": factors["vector"], "hbm": factors["hbm"]})
    hw.sources["sustained"] = factors["source"]


def _from_knowledge(hw: Hardware, key: str) -> None:
    entry = _profiles()["profiles"][key]
    _from_numbers(hw, entry, f"knowledge/hardware_profiles.yaml ({entry['sources']['cores_and_clock']})")
    hw.hbm_gbps = entry.get("hbm_gbps")
    hw.sources["hbm_gbps"] = entry["sources"]["hbm_gbps"]
    hw.facts["generation"] = entry.get("generation")


def parse_platform_ini(path: Path) -> dict:
    """Cores, clock, memory and dtype MKN of a CANN ``platform_config/<SoC>.ini``."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8", errors="replace"))
    except configparser.Error as exc:
        raise BadInput(path, f"unreadable platform config: {exc}") from exc

    def number(section: str, key: str) -> float | None:
        try:
            return float(parser.get(section, key))
        except (configparser.Error, ValueError):
            return None

    soc = parser.get("version", "SoC_version", fallback=None) or path.stem
    cores = number("SoCInfo", "cube_core_cnt") or number("SoCInfo", "ai_core_cnt")
    numbers = {
        "soc_version": soc,
        "short_soc_version": parser.get("version", "Short_SoC_version", fallback=None),
        "cube_core_count": int(cores) if cores else None,
        "vector_core_count": int(number("SoCInfo", "vector_core_cnt") or 0) or None,
        "cube_freq_mhz": number("AICoreSpec", "cube_freq"),
        "vector_lanes": int(number("AICoreSpec", "vec_calc_size") or 0) or None,
        "hbm_gib": (number("SoCInfo", "memory_size") or 0) / 2**30 or None,
        "dtype_mkn": {},
    }
    for key, dtype in (("Default", None), ("DT_INT8", "int8")):
        raw = parser.get("DtypeMKN", key, fallback=None)
        if raw:
            dims = [int(x) for x in raw.split(",")]
            for name in ["bf16", "fp16"] if dtype is None else [dtype]:
                numbers["dtype_mkn"][name] = dims
    return numbers


def cann_platform_inis() -> dict[str, Path]:
    """SoC name → ini path of every CANN platform config found on this (analysis) host."""
    roots = [os.environ[v] for v in CANN_DIR_ENV if os.environ.get(v)] + list(CANN_DEFAULT_DIRS)
    found: dict[str, Path] = {}
    for root in roots:
        base = Path(root)
        if not base.is_dir():
            continue
        for pattern in INI_GLOBS:
            for path in sorted(base.glob(pattern)):
                if path.stem.lower().startswith("ascend") and path.is_file():
                    found.setdefault(path.stem, path)
    return found


def _from_ini(hw: Hardware, path: Path) -> bool:
    numbers = parse_platform_ini(path)
    if not numbers["cube_core_count"] or not numbers["cube_freq_mhz"]:
        hw.limitations.append(f"{path} has no cube_core_cnt / cube_freq: its peaks are not used")
        return False
    _from_numbers(hw, numbers, f"CANN {path}")
    return True


def _load_profile_json(path: str) -> dict:
    file = Path(path)
    if not file.is_file():
        raise BadInput(file, "hardware profile not found")
    try:
        data = json.loads(read_input_bytes(file).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(file, f"hardware profile is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cube_tflops"), dict) or not data["cube_tflops"]:
        raise BadInput(file, 'hardware profile needs "cube_tflops": {"bf16": <TFLOPS>, ...}')
    return data


def _from_json(hw: Hardware, hardware_profile: str) -> Hardware:
    data = _load_profile_json(hardware_profile)
    hw.name, hw.how = str(data.get("name") or Path(hardware_profile).stem), "hardware_profile"
    hw.cube_tflops = {str(k).lower(): float(v) for k, v in data["cube_tflops"].items()}
    hw.vector_tflops = data.get("vector_tflops")
    hw.hbm_gbps = data.get("hbm_gbps")
    for key, value in (data.get("sustained_factors") or {}).items():
        hw.sustained[key if key in ("vector", "hbm") else f"cube.{key}"] = float(value)
    hw.sources = {k: f"--hardware-profile {hardware_profile}" for k in ("cube_tflops", "vector_tflops", "hbm_gbps")}
    return hw


def _soc_name(hw: Hardware, hardware_model: str | None, inis: dict[str, Path]) -> tuple[str | None, str]:
    """(SoC name, how it was chosen): the flag, the capture's one SoC, or the host's one ini of its family."""
    if hardware_model:
        name = _canonical(hardware_model) or next((s for s in inis if s.lower() == hardware_model.lower()), None)
        if name is None:
            known = sorted(_profiles()["profiles"]) + sorted(inis)
            raise UsageError(f"--hardware-model {hardware_model!r} is not known; known: {', '.join(known)}")
        return name, "hardware_model"
    exact = {_canonical(d) for d in hw.capture_devices} - {None}
    if len(exact) == 1:
        return exact.pop(), "capture"
    hw.candidates = sorted({m for d in hw.capture_devices for m in _family(d)})
    on_host = [s for s in inis if any(s.lower() == m.lower() for m in hw.candidates)]
    if len(on_host) == 1:
        hw.limitations.append(
            f"the capture names only {', '.join(hw.capture_devices)}; {on_host[0]} is the one ini of that family "
            "in this analysis host's CANN — an analysis host is not proof of the capture host"
        )
        return on_host[0], "cann_ini_only_family_match"
    return None, "unresolved"


def check_hardware_model(name: str | None) -> None:
    """Refuse an unknown ``--hardware-model`` before any root is analyzed (one usage error, not one per root)."""
    if name and _canonical(name) is None and not any(s.lower() == name.lower() for s in cann_platform_inis()):
        known = sorted(_profiles()["profiles"])
        raise UsageError(f"--hardware-model {name!r} is not known; known: {', '.join(known)}")


def _unresolved(hw: Hardware) -> Hardware:
    if hw.capture_devices:
        hw.limitations.append(
            f"the capture names {', '.join(hw.capture_devices)}, not one SoC "
            f"({', '.join(hw.candidates) or 'no known variant'}): MFU and roofline need --hardware-model"
        )
    else:
        hw.limitations.append("the capture does not name its NPU: MFU and roofline need --hardware-model")
    return hw


def choose(
    hardware_model: str | None, hardware_profile: str | None, cann_scan: bool, capture_devices: list[str]
) -> Hardware:
    """The hardware of a capture and how it was chosen (see the module doc for the order)."""
    hw = Hardware(capture_devices=sorted(set(capture_devices)))
    _sustained(hw)
    if hardware_profile:
        return _from_json(hw, hardware_profile)
    inis = cann_platform_inis() if cann_scan else {}
    name, how = _soc_name(hw, hardware_model, inis)
    if name is None:
        return _unresolved(hw)
    hw.name, hw.how = name, how
    profile_key = _canonical(name)
    ini = next((p for s, p in inis.items() if s.lower() == name.lower()), None)
    if ini is not None and _from_ini(hw, ini):
        if profile_key:
            entry = _profiles()["profiles"][profile_key]
            hw.hbm_gbps = entry.get("hbm_gbps")
            hw.sources["hbm_gbps"] = entry["sources"]["hbm_gbps"]
        else:
            hw.limitations.append(f"no HBM bandwidth known for {name}: memory roofline skipped")
        hw.limitations.append("peaks read from this analysis host's CANN; they describe the named SoC only")
    elif profile_key:
        _from_knowledge(hw, profile_key)
    return hw
