//! GPU figures for heartbeats: from NVML when built with `--features nvml`
//! and asked for with `--nvml`, else from the command line.

use ferry_sfu::driver::heartbeat::GpuReader;

#[cfg(feature = "nvml")]
pub fn reader(enabled: bool) -> Option<GpuReader> {
    use std::sync::{Arc, Mutex};

    use ferry_scheduler::scoring::{GpuProvider, NvmlConfig, NvmlGpu};

    if !enabled {
        return None;
    }
    match NvmlGpu::new(NvmlConfig::default()) {
        Ok(nvml) => {
            let nvml = Mutex::new(nvml);
            Some(Arc::new(move || {
                let mut g = nvml.lock().ok()?;
                match g.figures() {
                    Ok(Some(f)) => Some(ferry_proto::api::GpuFigures {
                        vram_free_bytes: f.vram_free_bytes,
                        vram_total_bytes: f.vram_total_bytes,
                        nvenc_sessions_free: f.nvenc_sessions_free,
                        nvenc_sessions_max: f.nvenc_sessions_max,
                    }),
                    Ok(None) => None,
                    Err(e) => {
                        tracing::warn!(error = %e, "reading NVML");
                        None
                    }
                }
            }))
        }
        Err(e) => {
            tracing::error!(error = %e, "--nvml: NVML is not available; reporting no GPU");
            None
        }
    }
}

#[cfg(not(feature = "nvml"))]
pub fn reader(enabled: bool) -> Option<GpuReader> {
    if enabled {
        tracing::error!("--nvml needs a build with `--features nvml`; reporting no GPU");
    }
    None
}
