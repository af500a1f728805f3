//! NVML, loaded at run time: opening it, and reading devices and the system.
//!
//! NVML comes with the NVIDIA driver as `libnvidia-ml.so.1`; nvml-wrapper dlopens it in
//! `init`. A missing library is not a crash but [`OpenError::NoLibrary`], which the binary turns
//! into a message and its own exit code. Tests point [`open`] at the simulator
//! (`crates/nvml-sim`) instead, so the same binding code runs without a GPU.

use std::ffi::OsStr;
use std::path::PathBuf;

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;
use serde::{Deserialize, Serialize};

use crate::reading::Reading;

/// The environment variable that names the NVML library to load (the simulator in tests).
pub const LIB_ENV: &str = "VRAM_PROBE_NVML_LIB";

/// The names tried, in order, when no library is given: the driver installs the versioned
/// name; the unversioned one exists only with development packages.
const DEFAULT_LIBS: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// NVML, initialised, with the library it came from.
#[derive(Debug)]
pub struct Handle {
    pub nvml: Nvml,
    /// The library path or name that was loaded.
    pub library: String,
}

/// Why NVML could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The library could not be loaded: no NVIDIA driver is installed (or not at that path).
    NoLibrary { tried: Vec<String>, detail: String },
    /// The library loaded, but the driver is not running.
    DriverNotLoaded { library: String },
    /// Any other failure of `nvmlInit`.
    Init { library: String, error: NvmlError },
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NoLibrary { tried, detail } => write!(
                f,
                "no NVIDIA driver: NVML could not be loaded (tried {}): {detail}\n\
                 NVML (libnvidia-ml.so.1) is installed with the NVIDIA driver. Install the driver \
                 (for example `sudo apt install nvidia-driver-550`, or NVIDIA's installer from \
                 https://www.nvidia.com/drivers), check that `nvidia-smi` works, or give the \
                 library's path with --nvml-lib or {LIB_ENV}.",
                tried.join(", ")
            ),
            OpenError::DriverNotLoaded { library } => write!(
                f,
                "the NVIDIA driver is not loaded ({library} was found, but nvmlInit reports no \
                 running driver). Load the kernel module (`sudo modprobe nvidia`) or reboot after \
                 installing the driver, then check that `nvidia-smi` works."
            ),
            OpenError::Init { library, error } => {
                write!(f, "NVML ({library}) failed to initialise: {error}")
            }
        }
    }
}

/// Opens NVML from `library`, else from [`LIB_ENV`], else from the driver's usual names.
pub fn open(library: Option<PathBuf>) -> Result<Handle, OpenError> {
    let chosen = library.or_else(|| std::env::var_os(LIB_ENV).map(PathBuf::from));
    let candidates: Vec<std::ffi::OsString> = match chosen {
        Some(path) => vec![path.into_os_string()],
        None => DEFAULT_LIBS.iter().map(|name| OsStr::new(name).to_os_string()).collect(),
    };
    let mut detail = String::new();
    for candidate in &candidates {
        let name = candidate.to_string_lossy().into_owned();
        match Nvml::builder().lib_path(candidate).init() {
            Ok(nvml) => return Ok(Handle { nvml, library: name }),
            Err(NvmlError::LibloadingError(error)) => detail = error.to_string(),
            Err(NvmlError::DriverNotLoaded) => {
                return Err(OpenError::DriverNotLoaded { library: name });
            }
            Err(error) => return Err(OpenError::Init { library: name, error }),
        }
    }
    Err(OpenError::NoLibrary {
        tried: candidates.iter().map(|c| c.to_string_lossy().into_owned()).collect(),
        detail,
    })
}

/// What the system reports once, for every device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SystemInfo {
    pub driver_version: Reading<String>,
    /// `12.4`.
    pub cuda_driver_version: Reading<String>,
    pub nvml_version: Reading<String>,
    /// The library that was loaded.
    pub nvml_library: String,
}

pub fn system(handle: &Handle) -> SystemInfo {
    let nvml = &handle.nvml;
    SystemInfo {
        driver_version: named("nvmlSystemGetDriverVersion", nvml.sys_driver_version()),
        cuda_driver_version: named(
            "nvmlSystemGetCudaDriverVersion_v2",
            nvml.sys_cuda_driver_version().map(|v| {
                format!(
                    "{}.{}",
                    nvml_wrapper::cuda_driver_version_major(v),
                    nvml_wrapper::cuda_driver_version_minor(v)
                )
            }),
        ),
        nvml_version: named("nvmlSystemGetNVMLVersion", nvml.sys_nvml_version()),
        nvml_library: handle.library.clone(),
    }
}

/// Device memory as NVML's `nvmlDeviceGetMemoryInfo_v2` reports it, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    pub total: u64,
    pub reserved: u64,
    pub used: u64,
    pub free: u64,
}

/// One GPU as `vram-probe devices` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub index: u32,
    pub name: Reading<String>,
    pub uuid: Reading<String>,
    pub pci_bus_id: Reading<String>,
    pub memory: Reading<Memory>,
    /// `hopper`, `ampere`, …: the names the `.vram` language uses.
    pub architecture: Reading<String>,
    /// `9.0`.
    pub compute_capability: Reading<String>,
    pub mig_enabled: Reading<bool>,
    pub ecc_enabled: Reading<bool>,
}

/// The device count, or why it is unavailable.
pub fn count(handle: &Handle) -> Result<u32, NvmlError> {
    handle.nvml.device_count()
}

/// Reads everything `devices` shows about GPU `index`. A call that fails makes its field
/// unavailable; the rest are still read.
pub fn device(handle: &Handle, index: u32) -> DeviceInfo {
    let device = match handle.nvml.device_by_index(index) {
        Ok(device) => device,
        Err(error) => {
            let why = format!("nvmlDeviceGetHandleByIndex: {error}");
            return DeviceInfo {
                index,
                name: Reading::unavailable(&why),
                uuid: Reading::unavailable(&why),
                pci_bus_id: Reading::unavailable(&why),
                memory: Reading::unavailable(&why),
                architecture: Reading::unavailable(&why),
                compute_capability: Reading::unavailable(&why),
                mig_enabled: Reading::unavailable(&why),
                ecc_enabled: Reading::unavailable(&why),
            };
        }
    };
    DeviceInfo {
        index,
        name: named("nvmlDeviceGetName", device.name()),
        uuid: named("nvmlDeviceGetUUID", device.uuid()),
        pci_bus_id: named("nvmlDeviceGetPciInfo_v3", device.pci_info().map(|p| p.bus_id)),
        memory: memory(&device),
        architecture: named(
            "nvmlDeviceGetArchitecture",
            device.architecture().map(|a| arch_name(&a)),
        ),
        compute_capability: named(
            "nvmlDeviceGetCudaComputeCapability",
            device.cuda_compute_capability().map(|c| format!("{}.{}", c.major, c.minor)),
        ),
        mig_enabled: named("nvmlDeviceGetMigMode", device.mig_mode().map(|m| m.current == 1)),
        ecc_enabled: named(
            "nvmlDeviceGetEccMode",
            device.is_ecc_enabled().map(|e| e.currently_enabled),
        ),
    }
}

/// A reading whose failure names the NVML function that failed.
fn named<T>(call: &str, result: Result<T, NvmlError>) -> Reading<T> {
    result.map_err(|error| format!("{call}: {error}")).into()
}

/// Memory info v2 of one device.
pub fn memory(device: &nvml_wrapper::Device<'_>) -> Reading<Memory> {
    named(
        "nvmlDeviceGetMemoryInfo_v2",
        device.memory_info().map(|m| Memory {
            total: m.total,
            reserved: m.reserved,
            used: m.used,
            free: m.free,
        }),
    )
}

/// The `.vram` language's name for an NVML architecture.
pub fn arch_name(arch: &nvml_wrapper::enums::device::DeviceArchitecture) -> String {
    use nvml_wrapper::enums::device::DeviceArchitecture as A;
    match arch {
        A::Kepler => "kepler",
        A::Maxwell => "maxwell",
        A::Pascal => "pascal",
        A::Volta => "volta",
        A::Turing => "turing",
        A::Ampere => "ampere",
        A::Ada => "ada",
        A::Hopper => "hopper",
        A::Blackwell => "blackwell",
        A::Unknown => "unknown",
    }
    .to_string()
}
