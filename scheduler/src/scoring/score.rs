//! Heartbeat figures → score → target weight (DESIGN §5).
//!
//! `score = w1·free_vram + w2·free_nvenc + w3·(1 − load) − w4·loss − w5·migration_cost`, every
//! term normalised to `[0, 1]` first so the coefficients compare like with like. See
//! `docs/scoring.md` for the rules and their numbers.

use serde::{Deserialize, Serialize};

use super::heartbeat::Heartbeat;
use super::weight::Weight;

/// The score coefficients. All finite and `>= 0`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScoreConfig {
    /// w1: weight of the free VRAM fraction.
    pub w_free_vram: f64,
    /// w2: weight of the free NVENC session fraction.
    pub w_free_nvenc: f64,
    /// w3: weight of the headroom `1 − load`.
    pub w_headroom: f64,
    /// w4: weight of the (scaled) packet loss, subtracted.
    pub w_loss: f64,
    /// w5: weight of the migration cost, subtracted.
    pub w_migration: f64,
    /// Packet loss fraction at which the loss term reaches 1 (`0.10`: 10 % loss is as bad as it
    /// gets; 1 % loss already costs a tenth of the term). Must be `> 0`.
    pub loss_full_scale: f64,
}

impl Default for ScoreConfig {
    fn default() -> Self {
        Self {
            w_free_vram: 0.25,
            w_free_nvenc: 0.25,
            w_headroom: 1.0,
            w_loss: 0.5,
            w_migration: 0.25,
            loss_full_scale: 0.10,
        }
    }
}

/// Why a scoring or controller configuration is unusable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A coefficient is negative, NaN or infinite.
    #[error("score coefficient {name} must be finite and >= 0, got {value}")]
    Coefficient {
        /// The coefficient's field name.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// `loss_full_scale` is not a positive finite number.
    #[error("loss_full_scale must be finite and > 0, got {0}")]
    LossFullScale(f64),
    /// A controller setting is out of range.
    #[error("{name} {problem}")]
    Controller {
        /// The setting's field name.
        name: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl ScoreConfig {
    /// Checks every coefficient.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, value) in [
            ("w_free_vram", self.w_free_vram),
            ("w_free_nvenc", self.w_free_nvenc),
            ("w_headroom", self.w_headroom),
            ("w_loss", self.w_loss),
            ("w_migration", self.w_migration),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ConfigError::Coefficient { name, value });
            }
        }
        if !(self.loss_full_scale.is_finite() && self.loss_full_scale > 0.0) {
            return Err(ConfigError::LossFullScale(self.loss_full_scale));
        }
        Ok(())
    }

    /// The largest score a node can reach: `w1 + w2 + w3` (all free, no load, loss or moves).
    /// A score of this value maps to the full weight W.
    pub fn max_score(&self) -> f64 {
        self.w_free_vram + self.w_free_nvenc + self.w_headroom
    }
}

/// The normalised terms of one score, each in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Terms {
    /// `vram_free / vram_total`; 0 without a GPU.
    pub free_vram: f64,
    /// `nvenc_free / nvenc_max`; 0 without NVENC.
    pub free_nvenc: f64,
    /// `load/capacity`: the largest of the cpu, memory, bandwidth and session ratios.
    pub load: f64,
    /// `min(1, packet_loss / loss_full_scale)`.
    pub loss: f64,
    /// `min(1, sessions_to_move / session_capacity)`.
    pub migration_cost: f64,
}

/// A node's score with the terms it came from (for `/v1/nodes` and for debugging a weight).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The normalised inputs.
    pub terms: Terms,
    /// The weighted sum; in `[−(w4 + w5), w1 + w2 + w3]`.
    pub value: f64,
}

/// `x` clamped into `[0, 1]`; NaN counts as `worst` (a broken sampler must not make a node look
/// better than it is).
fn unit(x: f64, worst: f64) -> f64 {
    if x.is_nan() { worst } else { x.clamp(0.0, 1.0) }
}

/// `used / capacity` clamped into `[0, 1]`; a capacity of 0 counts as `if_zero`.
fn ratio(used: u64, capacity: u64, if_zero: f64) -> f64 {
    if capacity == 0 {
        if_zero
    } else {
        // u64 → f64 loses precision only above 2^53 bit/s, far beyond any link.
        (used as f64 / capacity as f64).min(1.0)
    }
}

/// Normalises a heartbeat's figures.
pub fn terms(hb: &Heartbeat, config: &ScoreConfig) -> Terms {
    let (free_vram, free_nvenc) = match &hb.gpu {
        Some(g) => (
            ratio(g.vram_free_bytes, g.vram_total_bytes, 0.0),
            ratio(
                u64::from(g.nvenc_sessions_free),
                u64::from(g.nvenc_sessions_max),
                0.0,
            ),
        ),
        None => (0.0, 0.0),
    };
    let load = [
        unit(hb.cpu, 1.0),
        unit(hb.memory, 1.0),
        ratio(hb.bandwidth_used_bps, hb.bandwidth_capacity_bps, 1.0),
        ratio(u64::from(hb.sessions), u64::from(hb.session_capacity), 1.0),
    ]
    .into_iter()
    .fold(0.0, f64::max);
    let loss = unit(unit(hb.packet_loss, 1.0) / config.loss_full_scale, 1.0);
    let migration_cost = ratio(
        u64::from(hb.sessions_to_move),
        u64::from(hb.session_capacity),
        0.0,
    );
    Terms {
        free_vram,
        free_nvenc,
        load,
        loss,
        migration_cost,
    }
}

/// Scores a heartbeat with the DESIGN §5 formula.
pub fn score(hb: &Heartbeat, config: &ScoreConfig) -> Score {
    let t = terms(hb, config);
    let value = config.w_free_vram * t.free_vram
        + config.w_free_nvenc * t.free_nvenc
        + config.w_headroom * (1.0 - t.load)
        - config.w_loss * t.loss
        - config.w_migration * t.migration_cost;
    Score { terms: t, value }
}

/// Maps a score onto the fixed weight scale: `W · clamp(score / max_score, 0, 1)`.
///
/// A node that is full on any dimension (`load == 1`) gets 0 whatever its GPU terms say: the
/// placement hash must send it nothing.
pub fn target_weight(score: &Score, config: &ScoreConfig) -> Weight {
    let max = config.max_score();
    if score.terms.load >= 1.0 || max <= 0.0 {
        return Weight::ZERO;
    }
    Weight::from_fraction(score.value / max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::heartbeat::GpuFigures;
    use ferry_proto::NodeId;

    const GIB: u64 = 1 << 30;

    fn hb() -> Heartbeat {
        Heartbeat {
            node: NodeId::new("node-a").unwrap(),
            cpu: 0.25,
            memory: 0.5,
            bandwidth_used_bps: 300_000_000,
            bandwidth_capacity_bps: 1_000_000_000,
            packet_loss: 0.05,
            sessions: 10,
            session_capacity: 40,
            sessions_to_move: 10,
            gpu: Some(GpuFigures {
                vram_free_bytes: 8 * GIB,
                vram_total_bytes: 16 * GIB,
                nvenc_sessions_free: 2,
                nvenc_sessions_max: 8,
            }),
            encoders: vec![],
        }
    }

    #[test]
    fn score_of_a_gpu_node_with_default_coefficients() {
        let c = ScoreConfig::default();
        let s = score(&hb(), &c);
        assert_eq!(
            s.terms,
            Terms {
                free_vram: 0.5,
                free_nvenc: 0.25,
                load: 0.5, // memory is the largest ratio (cpu 0.25, bandwidth 0.3, sessions 0.25)
                loss: 0.5, // 5 % of the 10 % full scale
                migration_cost: 0.25,
            }
        );
        // 0.25·0.5 + 0.25·0.25 + 1·0.5 − 0.5·0.5 − 0.25·0.25
        assert_eq!(s.value, 0.375);
        assert_eq!(c.max_score(), 1.5);
        assert_eq!(target_weight(&s, &c), Weight::from_units(2_500));
    }

    #[test]
    fn score_without_gpu_has_only_the_headroom_term() {
        let c = ScoreConfig::default();
        let h = Heartbeat {
            gpu: None,
            packet_loss: 0.0,
            sessions_to_move: 0,
            ..hb()
        };
        let s = score(&h, &c);
        assert_eq!((s.terms.free_vram, s.terms.free_nvenc), (0.0, 0.0));
        assert_eq!(s.value, 0.5);
        // An idle node without a GPU tops out at w3 / (w1 + w2 + w3) = 2/3 of W.
        let idle = Heartbeat {
            cpu: 0.0,
            memory: 0.0,
            bandwidth_used_bps: 0,
            sessions: 0,
            ..h
        };
        assert_eq!(
            target_weight(&score(&idle, &c), &c),
            Weight::from_units(6_667)
        );
    }

    #[test]
    fn custom_coefficients_are_applied_term_by_term() {
        let c = ScoreConfig {
            w_free_vram: 1.0,
            w_free_nvenc: 2.0,
            w_headroom: 4.0,
            w_loss: 8.0,
            w_migration: 16.0,
            loss_full_scale: 0.5,
        };
        let h = Heartbeat {
            packet_loss: 0.125,
            sessions_to_move: 1,
            ..hb()
        };
        // 1·0.5 + 2·0.25 + 4·0.5 − 8·0.25 − 16·(1/40)
        let s = score(&h, &c);
        assert_eq!(s.terms.loss, 0.25);
        assert_eq!(s.terms.migration_cost, 0.025);
        assert_eq!(s.value, 0.6);
        assert_eq!(target_weight(&s, &c), Weight::from_units(857)); // 0.6 / 7
    }

    #[test]
    fn a_full_or_lossy_node_gets_zero_weight() {
        let c = ScoreConfig::default();
        let full = Heartbeat {
            sessions: 40,
            ..hb()
        };
        let s = score(&full, &c);
        assert_eq!(s.terms.load, 1.0);
        assert_eq!(target_weight(&s, &c), Weight::ZERO);

        let lossy = Heartbeat {
            packet_loss: 0.3,
            cpu: 0.9,
            ..hb()
        };
        let s = score(&lossy, &c);
        assert_eq!(s.terms.loss, 1.0);
        assert!(s.value < 0.0);
        assert_eq!(target_weight(&s, &c), Weight::ZERO);
    }

    #[test]
    fn out_of_range_figures_are_clamped_to_the_worst_case() {
        let c = ScoreConfig::default();
        let h = Heartbeat {
            cpu: f64::NAN,
            memory: -3.0,
            packet_loss: 7.0,
            bandwidth_capacity_bps: 0,
            session_capacity: 0,
            sessions_to_move: 5,
            gpu: Some(GpuFigures {
                vram_free_bytes: 32 * GIB,
                vram_total_bytes: 16 * GIB,
                nvenc_sessions_free: 3,
                nvenc_sessions_max: 0,
            }),
            ..hb()
        };
        let t = terms(&h, &c);
        assert_eq!(
            t,
            Terms {
                free_vram: 1.0,
                free_nvenc: 0.0,
                load: 1.0,
                loss: 1.0,
                migration_cost: 0.0,
            }
        );
    }

    #[test]
    fn config_validation_names_the_bad_field() {
        let bad = ScoreConfig {
            w_loss: -1.0,
            ..ScoreConfig::default()
        };
        assert_eq!(
            bad.validate(),
            Err(ConfigError::Coefficient {
                name: "w_loss",
                value: -1.0
            })
        );
        let bad = ScoreConfig {
            loss_full_scale: 0.0,
            ..ScoreConfig::default()
        };
        assert_eq!(bad.validate(), Err(ConfigError::LossFullScale(0.0)));
        assert_eq!(ScoreConfig::default().validate(), Ok(()));
    }
}
