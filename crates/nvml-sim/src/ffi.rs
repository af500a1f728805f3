//! The exported NVML C functions: the only `unsafe` code in the workspace.
//!
//! Each function asks [`crate::Sim`] (safe code) for its answer and writes it through the caller's
//! out-pointers with `put` or `put_str`, which check for null and for buffer length. Device
//! handles are opaque to callers: a handle is the device index plus one, as a pointer-sized
//! integer that is never dereferenced.

#![allow(unsafe_code, reason = "a C ABI library writes through the caller's pointers")]

use std::ffi::{CStr, c_char, c_int, c_uint};

use crate::sys::{
    NVML_DEVICE_ARCH_ADA, NVML_DEVICE_ARCH_AMPERE, NVML_DEVICE_ARCH_BLACKWELL,
    NVML_DEVICE_ARCH_HOPPER, NVML_DEVICE_ARCH_KEPLER, NVML_DEVICE_ARCH_MAXWELL,
    NVML_DEVICE_ARCH_PASCAL, NVML_DEVICE_ARCH_TURING, NVML_DEVICE_ARCH_UNKNOWN,
    NVML_DEVICE_ARCH_VOLTA, nvmlDevice_t, nvmlEnableState_enum_NVML_FEATURE_DISABLED,
    nvmlEnableState_enum_NVML_FEATURE_ENABLED, nvmlEnableState_t, nvmlMemory_v2_t, nvmlPciInfo_t,
    nvmlProcessInfo_t, nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE, nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED, nvmlReturn_enum_NVML_SUCCESS, nvmlReturn_t,
};
use crate::{Code, FaultCall};

/// NVML's "not available" in a 64-bit field (`NVML_VALUE_NOT_AVAILABLE`, -1).
const NOT_AVAILABLE: u64 = u64::MAX;
/// "No instance" in the MIG id fields of a process entry.
const NO_INSTANCE: u32 = u32::MAX;

fn code(result: Result<(), Code>) -> nvmlReturn_t {
    match result {
        Ok(()) => nvmlReturn_enum_NVML_SUCCESS,
        Err(code) => code,
    }
}

/// Writes `value` through `ptr`.
///
/// # Safety
/// `ptr` is null or valid for a write of `T`.
unsafe fn put<T>(ptr: *mut T, value: T) -> Result<(), Code> {
    if ptr.is_null() {
        return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Copies `text` and a terminating NUL into the caller's buffer of `len` bytes.
///
/// # Safety
/// `buf` is null or valid for writes of `len` bytes.
unsafe fn put_str(buf: *mut c_char, len: c_uint, text: &str) -> Result<(), Code> {
    if buf.is_null() {
        return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    }
    if text.len() + 1 > len as usize {
        return Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: `buf` holds at least `text.len() + 1` bytes (checked above).
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}

fn index(device: nvmlDevice_t) -> usize {
    device.addr().wrapping_sub(1)
}

fn handle(index: usize) -> nvmlDevice_t {
    std::ptr::without_provenance_mut(index + 1)
}

fn arch_code(name: &str) -> c_uint {
    match name {
        "kepler" => NVML_DEVICE_ARCH_KEPLER,
        "maxwell" => NVML_DEVICE_ARCH_MAXWELL,
        "pascal" => NVML_DEVICE_ARCH_PASCAL,
        "volta" => NVML_DEVICE_ARCH_VOLTA,
        "turing" => NVML_DEVICE_ARCH_TURING,
        "ampere" => NVML_DEVICE_ARCH_AMPERE,
        "ada" => NVML_DEVICE_ARCH_ADA,
        "hopper" => NVML_DEVICE_ARCH_HOPPER,
        "blackwell" => NVML_DEVICE_ARCH_BLACKWELL,
        _ => NVML_DEVICE_ARCH_UNKNOWN,
    }
}

fn state(enabled: bool) -> nvmlEnableState_t {
    if enabled {
        nvmlEnableState_enum_NVML_FEATURE_ENABLED
    } else {
        nvmlEnableState_enum_NVML_FEATURE_DISABLED
    }
}

/// Loads the scenario and starts its clock.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    code(crate::init())
}

/// As [`nvmlInit_v2`]; the flags are ignored.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    code(crate::init())
}

#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    code(crate::shutdown())
}

/// A static description of a return code.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let text: &'static CStr = match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        7 => c"Insufficient Size",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        15 => c"GPU is lost",
        _ => c"Unknown Error",
    };
    text.as_ptr()
}

/// # Safety
/// `version` is valid for writes of `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        sim.system()?;
        // SAFETY: the caller's contract.
        unsafe { put_str(version, length, &sim.scenario.driver_version) }
    }))
}

/// # Safety
/// `version` is valid for writes of `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(
    version: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        sim.system()?;
        // SAFETY: the caller's contract.
        unsafe { put_str(version, length, &sim.scenario.nvml_version) }
    }))
}

/// # Safety
/// `version` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> nvmlReturn_t {
    code(crate::with(|sim| {
        sim.system()?;
        match sim.scenario.cuda_driver_version {
            // SAFETY: the caller's contract.
            Some(v) => unsafe { put(version, v) },
            None => Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED),
        }
    }))
}

/// # Safety
/// `count` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    code(crate::with(|sim| {
        sim.system()?;
        let n = c_uint::try_from(sim.scenario.devices.len()).unwrap_or(c_uint::MAX);
        // SAFETY: the caller's contract.
        unsafe { put(count, n) }
    }))
}

/// # Safety
/// `device` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        sim.device(index as usize, FaultCall::Any)?;
        // SAFETY: the caller's contract.
        unsafe { put(device, handle(index as usize)) }
    }))
}

/// # Safety
/// `value` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(
    device: nvmlDevice_t,
    value: *mut c_uint,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        sim.device(index(device), FaultCall::Any)?;
        let i = c_uint::try_from(index(device)).unwrap_or(c_uint::MAX);
        // SAFETY: the caller's contract.
        unsafe { put(value, i) }
    }))
}

/// # Safety
/// `name` is valid for writes of `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: nvmlDevice_t,
    name: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        let spec = sim.device(index(device), FaultCall::Any)?;
        // SAFETY: the caller's contract.
        unsafe { put_str(name, length, &spec.name) }
    }))
}

/// # Safety
/// `uuid` is valid for writes of `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: nvmlDevice_t,
    uuid: *mut c_char,
    length: c_uint,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        let spec = sim.device(index(device), FaultCall::Any)?;
        // SAFETY: the caller's contract.
        unsafe { put_str(uuid, length, &spec.uuid) }
    }))
}

/// # Safety
/// `pci` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        let spec = sim.device(index(device), FaultCall::Any)?;
        let mut bus_id = [0 as c_char; 32];
        let mut legacy = [0 as c_char; 16];
        for (slot, byte) in bus_id.iter_mut().take(31).zip(spec.pci_bus_id.bytes()) {
            *slot = byte.cast_signed();
        }
        for (slot, byte) in legacy.iter_mut().take(15).zip(spec.pci_bus_id.bytes()) {
            *slot = byte.cast_signed();
        }
        let parse = |range: std::ops::Range<usize>| {
            spec.pci_bus_id.get(range).and_then(|s| u32::from_str_radix(s, 16).ok()).unwrap_or(0)
        };
        let info = nvmlPciInfo_t {
            busIdLegacy: legacy,
            domain: parse(0..8),
            bus: parse(9..11),
            device: parse(12..14),
            pciDeviceId: spec.pci_device_id,
            pciSubSystemId: 0,
            busId: bus_id,
        };
        // SAFETY: the caller's contract.
        unsafe { put(pci, info) }
    }))
}

/// # Safety
/// `memory` is valid for a read and a write, with its `version` set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        if memory.is_null() {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        // NVML_STRUCT_VERSION(Memory, 2): the struct's size, with the version in the top byte.
        let expected = u32::try_from(size_of::<nvmlMemory_v2_t>()).unwrap_or(0) | (2 << 24);
        // SAFETY: non-null and readable by the caller's contract.
        let version = unsafe { (*memory).version };
        if version != expected {
            return Err(nvmlReturn_enum_NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let m = sim.memory(index(device))?;
        let value = nvmlMemory_v2_t {
            version,
            total: m.total,
            reserved: m.reserved,
            free: m.free,
            used: m.used,
        };
        // SAFETY: the caller's contract.
        unsafe { put(memory, value) }
    }))
}

/// With `infos` null or `*count` too small, sets `*count` to the number of processes and
/// returns "insufficient size" (or success when there are none), as NVML does.
///
/// # Safety
/// `count` is valid for a read and a write; `infos` is null or valid for writes of `*count`
/// entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        if count.is_null() {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        let found = sim.processes(index(device))?;
        let n = c_uint::try_from(found.len()).unwrap_or(c_uint::MAX);
        // SAFETY: `count` is non-null and readable by the caller's contract.
        let room = unsafe { count.read() };
        // SAFETY: as above, writable.
        unsafe { put(count, n)? };
        if n == 0 {
            return Ok(());
        }
        if infos.is_null() || room < n {
            return Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (i, entry) in found.iter().enumerate() {
            let info = nvmlProcessInfo_t {
                pid: entry.pid,
                usedGpuMemory: entry.used.unwrap_or(NOT_AVAILABLE),
                gpuInstanceId: NO_INSTANCE,
                computeInstanceId: NO_INSTANCE,
            };
            // SAFETY: `i < n <= room`, and `infos` holds `room` entries.
            unsafe { infos.add(i).write(info) };
        }
        Ok(())
    }))
}

/// # Safety
/// `arch` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(
    device: nvmlDevice_t,
    arch: *mut c_uint,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        let spec = sim.device(index(device), FaultCall::Any)?;
        let name = spec.architecture.as_deref().ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        // SAFETY: the caller's contract.
        unsafe { put(arch, arch_code(name)) }
    }))
}

/// # Safety
/// `major` and `minor` are valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        let spec = sim.device(index(device), FaultCall::Any)?;
        let [a, b] = spec.compute_capability.ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?;
        // SAFETY: the caller's contract.
        unsafe {
            put(major, a)?;
            put(minor, b)
        }
    }))
}

/// # Safety
/// `current` and `pending` are valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        let spec = sim.device(index(device), FaultCall::Any)?;
        let mode = c_uint::from(spec.mig.ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?);
        // SAFETY: the caller's contract.
        unsafe {
            put(current, mode)?;
            put(pending, mode)
        }
    }))
}

/// # Safety
/// `current` and `pending` are valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    code(crate::with(|sim| {
        let spec = sim.device(index(device), FaultCall::Any)?;
        let mode = state(spec.ecc.ok_or(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)?);
        // SAFETY: the caller's contract.
        unsafe {
            put(current, mode)?;
            put(pending, mode)
        }
    }))
}
