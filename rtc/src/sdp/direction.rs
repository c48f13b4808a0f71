//! Media direction (`a=sendrecv`, `a=recvonly`, …), also the direction of an `a=extmap`.

use super::description::Attribute;

/// Media direction (`a=sendrecv` etc.); also the direction of an `a=extmap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `sendrecv` (the default).
    SendRecv,
    /// `sendonly`.
    SendOnly,
    /// `recvonly`.
    RecvOnly,
    /// `inactive`.
    Inactive,
}

impl Direction {
    /// The attribute name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SendRecv => "sendrecv",
            Self::SendOnly => "sendonly",
            Self::RecvOnly => "recvonly",
            Self::Inactive => "inactive",
        }
    }

    /// Maps an attribute name; `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "sendrecv" => Some(Self::SendRecv),
            "sendonly" => Some(Self::SendOnly),
            "recvonly" => Some(Self::RecvOnly),
            "inactive" => Some(Self::Inactive),
            _ => None,
        }
    }

    /// The direction seen from the other side (`sendonly` ↔ `recvonly`).
    pub fn reverse(self) -> Self {
        match self {
            Self::SendOnly => Self::RecvOnly,
            Self::RecvOnly => Self::SendOnly,
            other => other,
        }
    }
}

impl From<Direction> for Attribute {
    fn from(d: Direction) -> Self {
        Attribute::flag(d.as_str())
    }
}
