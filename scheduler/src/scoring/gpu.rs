//! Where a node's GPU figures come from: NVML on a GPU machine ([`super::NvmlGpu`], feature
//! `nvml`), the config file elsewhere ([`ConfigGpu`]), a script in tests ([`FakeGpu`]).
//!
//! The node's heartbeat loop asks its provider once per heartbeat and puts [`aggregate`] of the
//! answer into [`Heartbeat::gpu`](super::Heartbeat::gpu).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::heartbeat::GpuFigures;

/// One GPU's figures.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceFigures {
    /// Device index as the driver numbers it.
    pub index: u32,
    /// Product name (`NVIDIA L4`).
    pub name: String,
    /// Unallocated video memory, bytes.
    pub vram_free_bytes: u64,
    /// Installed video memory, bytes.
    pub vram_total_bytes: u64,
    /// NVENC sessions open now.
    pub nvenc_sessions_used: u32,
    /// NVENC sessions the device allows; 0 for a device without NVENC.
    pub nvenc_sessions_max: u32,
}

impl DeviceFigures {
    /// NVENC sessions that can still be opened.
    pub fn nvenc_sessions_free(&self) -> u32 {
        self.nvenc_sessions_max
            .saturating_sub(self.nvenc_sessions_used)
    }
}

/// The node's figures: every device summed. `None` for no device.
pub fn aggregate(devices: &[DeviceFigures]) -> Option<GpuFigures> {
    if devices.is_empty() {
        return None;
    }
    Some(devices.iter().fold(GpuFigures::default(), |acc, d| {
        GpuFigures {
            vram_free_bytes: acc.vram_free_bytes.saturating_add(d.vram_free_bytes),
            vram_total_bytes: acc.vram_total_bytes.saturating_add(d.vram_total_bytes),
            nvenc_sessions_free: acc
                .nvenc_sessions_free
                .saturating_add(d.nvenc_sessions_free()),
            nvenc_sessions_max: acc.nvenc_sessions_max.saturating_add(d.nvenc_sessions_max),
        }
    }))
}

/// Why GPU figures could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// The GPU library or driver is missing; the node should use [`ConfigGpu`] or report no GPU.
    #[error("GPU figures unavailable: {0}")]
    NotPresent(String),
    /// One query on one device failed.
    #[error("GPU {device}: {what} failed: {reason}")]
    Query {
        /// Device index.
        device: u32,
        /// The query (`memory_info`).
        what: &'static str,
        /// The library's error.
        reason: String,
    },
}

/// A source of GPU figures.
pub trait GpuProvider {
    /// Every device's figures now.
    fn devices(&mut self) -> Result<Vec<DeviceFigures>, GpuError>;

    /// The node's figures now ([`aggregate`] of [`GpuProvider::devices`]).
    fn figures(&mut self) -> Result<Option<GpuFigures>, GpuError> {
        self.devices().map(|d| aggregate(&d))
    }
}

/// Figures from the config file, the same every time: for machines without NVML, and for
/// declaring a node's GPU when the scheduler may not query it. Empty means no GPU.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ConfigGpu {
    /// The declared devices.
    pub devices: Vec<DeviceFigures>,
}

impl ConfigGpu {
    /// No GPU.
    pub fn none() -> Self {
        Self::default()
    }

    /// These devices.
    pub fn new(devices: Vec<DeviceFigures>) -> Self {
        Self { devices }
    }
}

impl GpuProvider for ConfigGpu {
    fn devices(&mut self) -> Result<Vec<DeviceFigures>, GpuError> {
        Ok(self.devices.clone())
    }
}

/// Scripted figures for tests: each call returns the next scripted answer; the last one repeats.
/// With nothing scripted it answers [`GpuError::NotPresent`].
#[derive(Debug, Clone, Default)]
pub struct FakeGpu {
    script: VecDeque<Result<Vec<DeviceFigures>, GpuError>>,
    calls: usize,
}

impl FakeGpu {
    /// An empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an answer.
    #[must_use]
    pub fn then(mut self, answer: Result<Vec<DeviceFigures>, GpuError>) -> Self {
        self.script.push_back(answer);
        self
    }

    /// How many times the figures were asked for.
    pub fn calls(&self) -> usize {
        self.calls
    }
}

impl GpuProvider for FakeGpu {
    fn devices(&mut self) -> Result<Vec<DeviceFigures>, GpuError> {
        self.calls += 1;
        let answer = if self.script.len() > 1 {
            self.script.pop_front()
        } else {
            self.script.front().cloned()
        };
        answer.unwrap_or_else(|| Err(GpuError::NotPresent("FakeGpu has no script".into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn l4(index: u32, free_gib: u64, used: u32) -> DeviceFigures {
        DeviceFigures {
            index,
            name: "NVIDIA L4".into(),
            vram_free_bytes: free_gib * GIB,
            vram_total_bytes: 24 * GIB,
            nvenc_sessions_used: used,
            nvenc_sessions_max: 8,
        }
    }

    #[test]
    fn config_gpu_returns_its_devices_every_time() {
        let mut none = ConfigGpu::none();
        assert_eq!(none.figures(), Ok(None));

        let json = r#"[{"index": 0, "name": "NVIDIA L4", "vram_free_bytes": 25769803776,
            "vram_total_bytes": 25769803776, "nvenc_sessions_max": 8}]"#;
        let mut cfg: ConfigGpu = serde_json::from_str(json).unwrap();
        assert_eq!(cfg.devices, vec![l4(0, 24, 0)]);
        for _ in 0..2 {
            assert_eq!(
                cfg.figures(),
                Ok(Some(GpuFigures {
                    vram_free_bytes: 24 * GIB,
                    vram_total_bytes: 24 * GIB,
                    nvenc_sessions_free: 8,
                    nvenc_sessions_max: 8,
                }))
            );
        }
    }

    #[test]
    fn fake_gpu_plays_its_script_and_repeats_the_last_answer() {
        let lost = GpuError::Query {
            device: 1,
            what: "memory_info",
            reason: "GpuLost".into(),
        };
        let mut fake = FakeGpu::new()
            .then(Ok(vec![l4(0, 20, 2), l4(1, 4, 9)]))
            .then(Err(lost.clone()))
            .then(Ok(vec![l4(0, 10, 8)]));
        assert_eq!(
            fake.figures(),
            Ok(Some(GpuFigures {
                vram_free_bytes: 24 * GIB,
                vram_total_bytes: 48 * GIB,
                // 6 + 0: a device over its limit counts as none free, not as negative.
                nvenc_sessions_free: 6,
                nvenc_sessions_max: 16,
            }))
        );
        assert_eq!(fake.figures(), Err(lost));
        let last = Ok(Some(GpuFigures {
            vram_free_bytes: 10 * GIB,
            vram_total_bytes: 24 * GIB,
            nvenc_sessions_free: 0,
            nvenc_sessions_max: 8,
        }));
        assert_eq!(fake.figures(), last);
        assert_eq!(fake.figures(), last);
        assert_eq!(fake.calls(), 4);

        let mut empty = FakeGpu::new();
        assert!(matches!(empty.devices(), Err(GpuError::NotPresent(_))));
    }
}
