//! nvml-sim: a stand-in for `libnvidia-ml.so` that answers from a scenario file.
//!
//! The probe loads NVML at run time through nvml-wrapper. Pointing nvml-wrapper's library path at
//! this crate's shared library (`libnvml_sim.so`) runs the probe's real binding code, with every
//! C call answered from a scripted scenario: devices, a memory timeline per device and per process,
//! and faults (an NVML error in a window of time, a lost device, permission denied on the process
//! list). Time is measured from `nvmlInit`.
//!
//! The scenario is a JSON file named by the environment variable [`SCENARIO_ENV`]; its format is
//! [`Scenario`] and is documented with examples in `docs/probe.md`. Only the functions the probe
//! calls are exported ([`ffi`]); nvml-wrapper resolves symbols one by one and reports a missing one
//! as an error of that call only.
//!
//! Everything here except [`ffi`] is safe Rust: the exported functions read the answer from
//! [`Sim`] and write it through the caller's pointers.

pub mod ffi;
mod procs;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use serde::Deserialize;

pub use nvml_wrapper_sys::bindings as sys;

/// The environment variable that names the scenario file.
pub const SCENARIO_ENV: &str = "VRAM_NVML_SIM_SCENARIO";

/// An NVML return code (`nvmlReturn_t`).
pub type Code = sys::nvmlReturn_t;

/// A scripted machine.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// What `nvmlSystemGetDriverVersion` answers.
    #[serde(default = "default_driver")]
    pub driver_version: String,
    /// What `nvmlSystemGetNVMLVersion` answers.
    #[serde(default = "default_nvml")]
    pub nvml_version: String,
    /// `nvmlSystemGetCudaDriverVersion_v2`, as NVML encodes it (`12040` for 12.4); `null` makes the
    /// call fail with "not supported".
    #[serde(default = "default_cuda")]
    pub cuda_driver_version: Option<i32>,
    pub devices: Vec<DeviceSpec>,
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// When time 0 is: `init` (`nvmlInit`, the default) or `first_process_list` (the first
    /// `nvmlDeviceGetComputeRunningProcesses_v3` call, which is a sampler's first tick; timelines
    /// then do not depend on how long the probe took to start).
    #[serde(default)]
    pub clock: Clock,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    #[default]
    Init,
    FirstProcessList,
}

fn default_driver() -> String {
    "550.54.15".to_string()
}

fn default_nvml() -> String {
    "12.550.54.15".to_string()
}

#[expect(clippy::unnecessary_wraps, reason = "serde's default must have the field's type")]
fn default_cuda() -> Option<i32> {
    Some(12040)
}

/// One GPU. A field given as `null` makes its NVML call fail with "not supported".
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    pub name: String,
    pub uuid: String,
    /// The PCI bus id, `00000000:18:00.0`.
    pub pci_bus_id: String,
    /// Device and vendor id, as NVML packs them.
    #[serde(default = "default_pci_device_id")]
    pub pci_device_id: u32,
    /// Total memory in bytes (the `nvidia-smi` total).
    pub total: u64,
    /// Memory the driver reserves, in bytes.
    #[serde(default)]
    pub reserved: u64,
    /// Whether `nvmlDeviceGetMemoryInfo_v2` exists for this device (older drivers lack it).
    #[serde(default = "yes")]
    pub memory_v2: bool,
    /// `kepler` … `blackwell`, or `null`.
    pub architecture: Option<String>,
    /// `[major, minor]`, or `null`.
    pub compute_capability: Option<[i32; 2]>,
    /// MIG mode (current), or `null` for a device without MIG.
    #[serde(default)]
    pub mig: Option<bool>,
    /// ECC mode (current), or `null` for a device without ECC.
    #[serde(default)]
    pub ecc: Option<bool>,
    /// Device-level used memory over time.
    pub used: Timeline,
    /// Processes with a compute context on this device.
    #[serde(default)]
    pub processes: Vec<ProcessSpec>,
}

fn default_pci_device_id() -> u32 {
    0x2330_10de
}

fn yes() -> bool {
    true
}

/// A step function of time: `[[t_ms, value], ...]`, sorted by time. Each value holds from its
/// time until the next point; before the first point the value is the first one.
#[derive(Clone, Debug, Deserialize)]
pub struct Timeline(pub Vec<(f64, u64)>);

impl Timeline {
    /// The value at `t_ms`.
    pub fn at(&self, t_ms: f64) -> u64 {
        let mut value = self.0.first().map_or(0, |p| p.1);
        for &(t, v) in &self.0 {
            if t <= t_ms {
                value = v;
            } else {
                break;
            }
        }
        value
    }
}

/// A process on a device, present from `from_ms` until `until_ms`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessSpec {
    /// A number, or `"child:I"` for the probe's I-th child (in start order), or `"child:I.J"` for
    /// the J-th child of that child, and so on: the commands the probe runs have unknown pids.
    pub pid: PidSpec,
    #[serde(default)]
    pub from_ms: f64,
    #[serde(default)]
    pub until_ms: Option<f64>,
    /// Used memory over time; `null` reports NVML's "not available" value.
    pub used: Option<Timeline>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum PidSpec {
    Fixed(u32),
    Path(String),
}

/// An NVML error injected into calls during a window of time.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Start of the window, ms after init.
    #[serde(default)]
    pub at_ms: f64,
    /// End of the window; `null` keeps the fault to the end (a lost device).
    #[serde(default)]
    pub until_ms: Option<f64>,
    /// The device it hits; `null` hits every device.
    #[serde(default)]
    pub device: Option<u32>,
    /// Which calls fail.
    pub call: FaultCall,
    /// The error: `unknown`, `gpu_lost`, `no_permission`, `timeout`, `not_supported`,
    /// `driver_not_loaded`, `insufficient_size`.
    pub error: String,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FaultCall {
    /// `nvmlInit_v2` itself.
    Init,
    /// `nvmlDeviceGetMemoryInfo_v2`.
    Memory,
    /// `nvmlDeviceGetComputeRunningProcesses_v3`.
    Processes,
    /// Every device call.
    Any,
    /// The system calls: `nvmlSystemGetDriverVersion`, `nvmlSystemGetNVMLVersion`,
    /// `nvmlSystemGetCudaDriverVersion_v2` and `nvmlDeviceGetCount_v2`. With `any`, every call
    /// after `nvmlInit` fails.
    System,
}

/// The NVML return code for an error name.
pub fn code_of(name: &str) -> Code {
    match name {
        "uninitialized" => sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED,
        "invalid_argument" => sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        "not_supported" => sys::nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        "no_permission" => sys::nvmlReturn_enum_NVML_ERROR_NO_PERMISSION,
        "not_found" => sys::nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
        "insufficient_size" => sys::nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
        "driver_not_loaded" => sys::nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
        "timeout" => sys::nvmlReturn_enum_NVML_ERROR_TIMEOUT,
        "gpu_lost" => sys::nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
        _ => sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN,
    }
}

/// One process as the process list reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessEntry {
    pub pid: u32,
    /// `None`: NVML's "not available".
    pub used: Option<u64>,
}

/// The memory figures of `nvmlMemory_v2_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    pub total: u64,
    pub reserved: u64,
    pub used: u64,
    pub free: u64,
}

/// A loaded scenario and its clock.
#[derive(Debug)]
pub struct Sim {
    pub scenario: Scenario,
    /// Time 0; `None` until the clock starts.
    start: Option<Instant>,
    /// How many `nvmlInit` calls are not yet matched by `nvmlShutdown`.
    inits: u32,
    pids: procs::Resolver,
    /// The last process list, kept so that a 1 kHz caller does not cost an allocation per call.
    listed: Vec<ProcessEntry>,
}

static SIM: Mutex<Option<Sim>> = Mutex::new(None);

fn lock() -> MutexGuard<'static, Option<Sim>> {
    SIM.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Loads the scenario named by [`SCENARIO_ENV`] (unless already initialised) and starts the clock.
pub fn init() -> Result<(), Code> {
    let mut guard = lock();
    if let Some(sim) = guard.as_mut() {
        sim.inits += 1;
        return Ok(());
    }
    let scenario = load().map_err(|message| {
        #[expect(clippy::print_stderr, reason = "the only way to say why a test scenario failed")]
        {
            eprintln!("nvml-sim: {message}");
        }
        sys::nvmlReturn_enum_NVML_ERROR_UNKNOWN
    })?;
    let start = (scenario.clock == Clock::Init).then(Instant::now);
    if let Some(fault) = scenario.faults.iter().find(|f| f.call == FaultCall::Init) {
        return Err(code_of(&fault.error));
    }
    *guard = Some(Sim {
        scenario,
        start,
        inits: 1,
        pids: procs::Resolver::default(),
        listed: Vec::new(),
    });
    Ok(())
}

fn load() -> Result<Scenario, String> {
    let path = std::env::var_os(SCENARIO_ENV)
        .ok_or_else(|| format!("{SCENARIO_ENV} is not set: it must name a scenario file"))?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.to_string_lossy()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.to_string_lossy()))
}

/// Ends one `nvmlInit`; the last one unloads the scenario.
pub fn shutdown() -> Result<(), Code> {
    let mut guard = lock();
    let Some(sim) = guard.as_mut() else {
        return Err(sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED);
    };
    sim.inits -= 1;
    if sim.inits == 0 {
        *guard = None;
    }
    Ok(())
}

/// Runs `f` on the loaded simulator, or fails with "uninitialized".
pub fn with<T>(f: impl FnOnce(&mut Sim) -> Result<T, Code>) -> Result<T, Code> {
    let mut guard = lock();
    match guard.as_mut() {
        Some(sim) => f(sim),
        None => Err(sys::nvmlReturn_enum_NVML_ERROR_UNINITIALIZED),
    }
}

impl Sim {
    /// Milliseconds since `nvmlInit`.
    pub fn now_ms(&self) -> f64 {
        self.start.map_or(0.0, |start| start.elapsed().as_secs_f64() * 1000.0)
    }

    /// The device at `index`, after the faults for `call` at this moment.
    pub fn device(&self, index: usize, call: FaultCall) -> Result<&DeviceSpec, Code> {
        let device = self
            .scenario
            .devices
            .get(index)
            .ok_or(sys::nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
        let now = self.now_ms();
        let hit = self.scenario.faults.iter().find(|f| {
            matches!(f.call, FaultCall::Any | FaultCall::Memory | FaultCall::Processes)
                && (f.call == FaultCall::Any || f.call == call)
                && f.device.is_none_or(|d| d as usize == index)
                && f.at_ms <= now
                && f.until_ms.is_none_or(|until| now < until)
        });
        match hit {
            Some(fault) => Err(code_of(&fault.error)),
            None => Ok(device),
        }
    }

    /// The error of a system call at this moment, if a `system` fault covers it.
    pub fn system(&self) -> Result<(), Code> {
        let now = self.now_ms();
        let hit = self.scenario.faults.iter().find(|f| {
            f.call == FaultCall::System
                && f.at_ms <= now
                && f.until_ms.is_none_or(|until| now < until)
        });
        hit.map_or(Ok(()), |fault| Err(code_of(&fault.error)))
    }

    /// Memory of a device now.
    pub fn memory(&self, index: usize) -> Result<Memory, Code> {
        let device = self.device(index, FaultCall::Memory)?;
        if !device.memory_v2 {
            return Err(sys::nvmlReturn_enum_NVML_ERROR_FUNCTION_NOT_FOUND);
        }
        let used = device.used.at(self.now_ms()).min(device.total - device.reserved);
        Ok(Memory {
            total: device.total,
            reserved: device.reserved,
            used,
            free: device.total - device.reserved - used,
        })
    }

    /// The processes on a device now; a process whose pid path does not resolve yet is left out.
    pub fn processes(&mut self, index: usize) -> Result<&[ProcessEntry], Code> {
        self.start.get_or_insert_with(Instant::now);
        let now = self.now_ms();
        self.device(index, FaultCall::Processes)?;
        let Sim { scenario, pids, listed: out, .. } = self;
        out.clear();
        for spec in &scenario.devices[index].processes {
            if now < spec.from_ms || spec.until_ms.is_some_and(|until| now >= until) {
                continue;
            }
            let pid = match &spec.pid {
                PidSpec::Fixed(pid) => Some(*pid),
                PidSpec::Path(path) => pids.resolve(path),
            };
            let Some(pid) = pid else { continue };
            out.push(ProcessEntry { pid, used: spec.used.as_ref().map(|t| t.at(now)) });
        }
        Ok(out.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_is_a_step_function() {
        let t = Timeline(vec![(0.0, 10), (100.0, 50), (105.0, 10)]);
        assert_eq!(t.at(-1.0), 10);
        assert_eq!(t.at(99.9), 10);
        assert_eq!(t.at(100.0), 50);
        assert_eq!(t.at(104.9), 50);
        assert_eq!(t.at(105.0), 10);
        assert_eq!(t.at(1e9), 10);
    }

    #[test]
    fn error_names_map_to_nvml_codes() {
        assert_eq!(code_of("gpu_lost"), 15);
        assert_eq!(code_of("no_permission"), 4);
        assert_eq!(code_of("anything else"), 999);
    }
}
