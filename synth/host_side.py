"""What the host side of a capture shows of a planted fault: the spans a stall leaves on the host (for
trace_view.json and the db alike), a planted device copy and the host call that launched it ahead, and
the environment torch_npu records. The timeline (``timeline.py``) opens the gaps; the writers put
these spans around them."""

from __future__ import annotations

# faults that idle the device in a host stall before a layer (the host spans say which stall)
HOST_STALLS = ("device_idle_bubble", "dataloader_stall", "gc_pause", "allocation_heavy", "dynamic_shape_recompile")
# a planted copy the device runs in stream order (MEMCPY_ASYNC) before a layer: the host launched it
# ahead (non-blocking, aclrtMemcpyAsync under aten::copy_), so its gap is the device's own
DEVICE_COPY = "memcpy_in_step"
PLANTED_GAPS = (*HOST_STALLS, DEVICE_COPY)  # the faults that open a gap before a layer
COPY_GBPS = 22.0  # PCIe host-to-device bandwidth of the planted copy (the real CNN capture's: 22 GB/s)
COPY_LAUNCH_NS = (30_000, 22_000)  # the copy's host call: this long before its device start, until this
# what torch_npu records of the environment (ENV_VARIABLES), as a well-set job has it; an env_setting
# fault records ASCEND_LAUNCH_BLOCKING=1 on its ranks
RECORDED_ENV = {
    "ASCEND_GLOBAL_LOG_LEVEL": "3",
    "HCCL_RDMA_TC": "",
    "HCCL_RDMA_SL": "",
    "ACLNN_CACHE_LIMIT": "",
    "HOST_CACHE_CAPACITY": "",
    "ASCEND_ENHANCE_ENABLE": "",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "ASCEND_LAUNCH_BLOCKING": "",
    "HCCL_ALGO": "",
}
# the host spans each planted stall leaves, for the trace and the db alike: framework ops (name, trace
# category) and CANN calls (name, their extra trace args); a garbage collection is the Python GC
# process's (trace_view.json only: the db does not record it), a device_idle_bubble a blocking .item()
STALL_SPANS: dict[str, tuple[tuple[tuple[str, str], ...], tuple[tuple[str, dict], ...]]] = {
    "dataloader_stall": (
        (
            ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "cpu_op"),
            ("torch/utils/data/dataloader.py(631): __next__", "python_function"),
        ),
        (),
    ),
    "allocation_heavy": ((("aten::empty", "cpu_op"),), (("aclrtMalloc", {}),)),  # the allocator out of blocks
    "gc_pause": ((), ()),
    # an op whose output shape follows the data, so the next op meets a shape it has not compiled for
    "dynamic_shape_recompile": (
        (("aten::masked_select", "cpu_op"),),
        (("aclopCompileAndExecute", {}), ("opCompile", {})),
    ),
    "device_idle_bubble": (
        (("aten::item", "cpu_op"), ("aten::_local_scalar_dense", "cpu_op")),
        (("aclrtSynchronizeStream", {"connection_id": 0}),),
    ),
    DEVICE_COPY: ((("aten::copy_", "cpu_op"),), (("aclrtMemcpyAsync", {}),)),
}


def host_span(kind: str, start_ns: int, end_ns: int) -> tuple[int, int]:
    """The host's span of a planted gap (start, end): a stall's own, a device copy's launch before it."""
    if kind == DEVICE_COPY:
        return start_ns - COPY_LAUNCH_NS[0], start_ns - COPY_LAUNCH_NS[1]
    return start_ns, end_ns
