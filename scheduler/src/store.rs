//! Where the scheduler keeps its state between restarts.
//!
//! [`Store`] is the seam: the embedded default is [`FileStore`] (one JSON
//! file, replaced atomically); [`crate::ha::EtcdStore`] (feature `etcd`) keeps it in etcd,
//! written only by the elected leader.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Serialize, de::DeserializeOwned};

/// Why the store could not load or save.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Reading or writing failed.
    #[error("store I/O on {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The stored state parses but cannot be used.
    #[error("stored state is unusable: {0}")]
    Invalid(String),
    /// A write by a scheduler that no longer leads, refused (etcd fencing).
    #[error("fenced: {0}")]
    Fenced(String),
    /// The stored state does not parse.
    #[error("store {path} is corrupt: {source}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The error.
        source: serde_json::Error,
    },
}

/// Persistence of one serialisable state value.
pub trait Store<T>: Send {
    /// The last saved state, if any.
    fn load(&mut self) -> Result<Option<T>, StoreError>;
    /// Saves `state`, replacing what was there. On return it is durable.
    fn save(&mut self, state: &T) -> Result<(), StoreError>;
    /// The store's revision of the state last loaded or saved, for a store that versions its
    /// writes (etcd); the routing table then takes it as its version.
    fn revision(&self) -> Option<u64> {
        None
    }
}

/// A JSON file, written to a temporary file, fsynced and renamed over the
/// old one, so a crash leaves either the old or the new state.
#[derive(Debug, Clone)]
pub struct FileStore {
    path: PathBuf,
}

impl FileStore {
    /// A store at `path` (its directory is created on first save).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

impl<T: Serialize + DeserializeOwned> Store<T> for FileStore {
    fn load(&mut self) -> Result<Option<T>, StoreError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|source| StoreError::Corrupt {
                        path: self.path.clone(),
                        source,
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(e)),
        }
    }

    fn save(&mut self, state: &T) -> Result<(), StoreError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.io(e))?;
        }
        let bytes = serde_json::to_vec_pretty(state).map_err(|source| StoreError::Corrupt {
            path: self.path.clone(),
            source,
        })?;
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(|e| self.io(e))?;
        f.write_all(&bytes).map_err(|e| self.io(e))?;
        f.sync_all().map_err(|e| self.io(e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| self.io(e))?;
        Ok(())
    }
}

/// A store that keeps the state in memory (tests, and `--state-file none`).
#[derive(Debug)]
pub struct MemoryStore<T> {
    state: Option<T>,
}

impl<T> Default for MemoryStore<T> {
    fn default() -> Self {
        Self { state: None }
    }
}

impl<T: Clone + Send> Store<T> for MemoryStore<T> {
    fn load(&mut self) -> Result<Option<T>, StoreError> {
        Ok(self.state.clone())
    }

    fn save(&mut self, state: &T) -> Result<(), StoreError> {
        self.state = Some(state.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_store_round_trips_and_reports_corruption() {
        let dir = std::env::temp_dir().join(format!("ferry-store-{}", std::process::id()));
        let path = dir.join("state.json");
        let mut s = FileStore::new(&path);
        assert_eq!(Store::<Vec<u32>>::load(&mut s).unwrap(), None);
        s.save(&vec![1u32, 2, 3]).unwrap();
        assert_eq!(
            Store::<Vec<u32>>::load(&mut s).unwrap(),
            Some(vec![1, 2, 3])
        );
        std::fs::write(&path, b"{not json").unwrap();
        assert!(matches!(
            Store::<Vec<u32>>::load(&mut s),
            Err(StoreError::Corrupt { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
