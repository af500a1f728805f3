"""Report what the framework saw to `vram-probe run`.

Import this module in a PyTorch workload that `vram-probe run` starts:

    import vram_probe_report                 # registers a hook that runs at exit
    ...
    vram_probe_report.set_quality("eval_loss", 1.234, higher_is_better=False)

At exit it writes, to the file named by the environment variable VRAM_PROBE_FRAMEWORK_FILE
(set by the probe for each command), the allocator's peaks per device
(torch.cuda.max_memory_allocated / max_memory_reserved), the PyTorch and CUDA versions, the
device UUIDs, and the workload's quality metric if one was set. The probe puts this view beside
the process and device views it measured itself. Outside the probe (no variable set) the module
does nothing. Without torch, or without CUDA, nothing is written unless `set_devices` was called.

The JSON format is documented in docs/probe.md ("Framework view").
"""

import atexit
import json
import os

ENV = "VRAM_PROBE_FRAMEWORK_FILE"
SCHEMA_VERSION = 1

_quality = None
_devices = None
_framework = None


def set_quality(metric, value, higher_is_better):
    """Record the workload's own quality measure (an eval loss, an accuracy)."""
    global _quality
    _quality = {
        "metric": str(metric),
        "value": float(value),
        "higher_is_better": bool(higher_is_better),
    }


def set_devices(devices, framework="custom", framework_version=None, cuda_version=None):
    """Give the peaks by hand, for a framework other than PyTorch.

    `devices` is a list of dicts with `index`, `allocated_peak`, `reserved_peak` (bytes) and
    optionally `uuid`.
    """
    global _devices, _framework
    _devices = [dict(d) for d in devices]
    _framework = (framework, framework_version, cuda_version)


def _torch_view():
    try:
        import torch  # noqa: PLC0415 - optional: the module works without torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    devices = []
    for i in range(torch.cuda.device_count()):
        entry = {
            "index": i,
            "allocated_peak": int(torch.cuda.max_memory_allocated(i)),
            "reserved_peak": int(torch.cuda.max_memory_reserved(i)),
        }
        uuid = getattr(torch.cuda.get_device_properties(i), "uuid", None)
        if uuid is not None:
            text = str(uuid)
            entry["uuid"] = text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text
        devices.append(entry)
    return {
        "framework": "pytorch",
        "framework_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "devices": devices,
    }


def view():
    """The view as a dict, or None when there is nothing to report."""
    if _devices is not None:
        name, version, cuda = _framework
        base = {
            "framework": name,
            "framework_version": version,
            "cuda_version": cuda,
            "devices": _devices,
        }
    else:
        base = _torch_view()
        if base is None:
            return None
    return {"schema_version": SCHEMA_VERSION, "kind": "vram-probe-framework", **base, "quality": _quality}


def write(path=None):
    """Write the view now (the exit hook calls this); returns the path written, or None."""
    path = path or os.environ.get(ENV)
    data = view()
    if not path or data is None:
        return None
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)
    return path


if os.environ.get(ENV):
    atexit.register(write)
