//! Why a configuration, a change of membership, a layout or a placement was refused.

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{field} must be {rule}, got {value}")]
    Invalid {
        field: &'static str,
        rule: &'static str,
        value: f64,
    },
}

/// Why a cluster change was refused (nothing changed).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeError {
    #[error("weight {weight} is outside [0, {scale}]")]
    Weight { weight: f64, scale: f64 },
    #[error("more than 64 distinct capabilities")]
    TooManyCapabilities,
}

/// Why a stored layout cannot be restored.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    #[error("layout version {0} is not supported")]
    Version(u32),
    #[error("layout weight scales ({layout}, {zone_layout}) differ from the config's")]
    Scale { layout: f64, zone_layout: f64 },
    #[error("bad configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("bad node or zone: {0}")]
    Change(#[from] ChangeError),
    #[error("{0} appears twice")]
    Duplicate(String),
    #[error("slot names {0}, which is not a member of that zone (or zone list)")]
    Unknown(String),
    #[error("{0} has no slot")]
    Unplaced(String),
    #[error("a generation is empty or too large")]
    Generation,
}

/// Why no node could take a session (a 503 for the caller).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unplaceable {
    #[error("no node with weight meets the requirements")]
    NoEligibleNode,
    #[error("every eligible node is at its load bound")]
    Full,
}
