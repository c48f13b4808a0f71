//! GPU figures from NVML (feature `nvml`).
//!
//! `nvml-wrapper` loads `libnvidia-ml.so.1` with `dlopen` when [`NvmlGpu::new`] runs, so this
//! builds and links on a machine without the NVIDIA driver, and fails there at runtime with
//! [`GpuError::NotPresent`].
//!
//! NVENC: NVML reports the sessions open (`nvmlDeviceGetEncoderStats`) and whether a device has an
//! H.264/HEVC encoder at all (`nvmlDeviceGetEncoderCapacity` answers `NOT_SUPPORTED` where it has
//! none, as on A100/H100/H200), but no session limit. The limit is therefore configuration
//! ([`NvmlConfig::nvenc_sessions_max`]), applied to every device that has an encoder.

use std::ffi::OsStr;
use std::path::PathBuf;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::EncoderType;
use nvml_wrapper::error::NvmlError;
use serde::{Deserialize, Serialize};

use super::gpu::{DeviceFigures, GpuError, GpuProvider};

/// Settings for [`NvmlGpu`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlConfig {
    /// The NVML library to load; `None` loads `libnvidia-ml.so.1` through the dynamic loader.
    pub lib_path: Option<PathBuf>,
    /// NVENC sessions each encoder-equipped device allows. NVML does not report this; 8 is the
    /// GeForce driver limit, data-centre GPUs are limited by throughput instead — set what the
    /// transcoder can really sustain.
    pub nvenc_sessions_max: u32,
}

impl Default for NvmlConfig {
    fn default() -> Self {
        Self {
            lib_path: None,
            nvenc_sessions_max: 8,
        }
    }
}

/// GPU figures read from NVML.
pub struct NvmlGpu {
    nvml: Nvml,
    config: NvmlConfig,
}

impl std::fmt::Debug for NvmlGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlGpu")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl NvmlGpu {
    /// Loads and initialises NVML. [`GpuError::NotPresent`] where the library or driver is
    /// missing.
    pub fn new(config: NvmlConfig) -> Result<Self, GpuError> {
        let nvml = match &config.lib_path {
            Some(path) => Nvml::builder().lib_path(OsStr::new(path)).init(),
            None => Nvml::init(),
        }
        .map_err(|e| {
            GpuError::NotPresent(format!(
                "NVML could not be initialised ({e}); on a GPU machine install the NVIDIA \
                 driver (it ships libnvidia-ml.so.1), elsewhere declare the figures in the \
                 config (ConfigGpu)"
            ))
        })?;
        Ok(Self { nvml, config })
    }

    /// The loaded library, for queries this type does not wrap (the probe example uses it).
    pub fn nvml(&self) -> &Nvml {
        &self.nvml
    }

    /// The settings.
    pub fn config(&self) -> &NvmlConfig {
        &self.config
    }
}

fn query(device: u32, what: &'static str) -> impl FnOnce(NvmlError) -> GpuError {
    move |e| GpuError::Query {
        device,
        what,
        reason: e.to_string(),
    }
}

impl GpuProvider for NvmlGpu {
    fn devices(&mut self) -> Result<Vec<DeviceFigures>, GpuError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|e| GpuError::NotPresent(format!("NVML device_count failed: {e}")))?;
        let mut out = Vec::new();
        for index in 0..count {
            let dev = self
                .nvml
                .device_by_index(index)
                .map_err(query(index, "device_by_index"))?;
            let name = dev.name().map_err(query(index, "name"))?;
            let mem = dev.memory_info().map_err(query(index, "memory_info"))?;
            let has_encoder = [EncoderType::H264, EncoderType::HEVC]
                .into_iter()
                .map(|t| dev.encoder_capacity(t))
                .try_fold(false, |any, r| match r {
                    Ok(_) => Ok(true),
                    Err(NvmlError::NotSupported) => Ok(any),
                    Err(e) => Err(e),
                })
                .map_err(query(index, "encoder_capacity"))?;
            let (used, max) = if has_encoder {
                let stats = dev.encoder_stats().map_err(query(index, "encoder_stats"))?;
                (stats.session_count, self.config.nvenc_sessions_max)
            } else {
                (0, 0)
            };
            out.push(DeviceFigures {
                index,
                name,
                vram_free_bytes: mem.free,
                vram_total_bytes: mem.total,
                nvenc_sessions_used: used,
                nvenc_sessions_max: max,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_clear_not_present_error() {
        let err = NvmlGpu::new(NvmlConfig {
            lib_path: Some("/nonexistent/libnvidia-ml.so.1".into()),
            ..NvmlConfig::default()
        })
        .unwrap_err();
        match err {
            GpuError::NotPresent(msg) => {
                assert!(msg.contains("NVML could not be initialised"), "{msg}");
                assert!(msg.contains("ConfigGpu"), "{msg}");
            }
            other => panic!("expected NotPresent, got {other:?}"),
        }
    }
}
