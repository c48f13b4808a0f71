//! Where the scheduler keeps the rooms' snapshots (`ferry_room::snapshot`): one value per room
//! and node, apart from the cluster state (a room's state may be megabytes; the cluster state
//! is rewritten on every change). Next to the state file by default (a directory of files,
//! each replaced atomically), in memory with `--state-file none`, and under
//! `{prefix}/rooms/{room}/{node}` in etcd (`--store etcd`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use ferry_proto::ids::NodeId;
use ferry_room::RoomId;
use ferry_room::snapshot::StoredSnapshot;

use crate::store::StoreError;

/// One stored snapshot as listed (`GET /v1/room-snapshots`).
#[derive(Clone, PartialEq, Eq, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SnapshotInfo {
    /// The room.
    #[schema(value_type = String)]
    pub room: RoomId,
    /// The node whose replica it is.
    #[schema(value_type = String)]
    pub node: NodeId,
    /// Its encoded size.
    pub bytes: usize,
    /// When it was stored, ms since the epoch.
    pub saved_at_ms: u64,
}

/// The rooms' snapshots, one per room and node. Each value is an encoded [`StoredSnapshot`].
pub trait RoomSnapshots: Send + Sync + std::fmt::Debug {
    /// Stores (replaces) `node`'s snapshot of `room`.
    fn put(&self, room: &RoomId, node: &NodeId, value: Vec<u8>) -> Result<(), StoreError>;
    /// Every node's snapshot of `room`.
    fn get(&self, room: &RoomId) -> Result<Vec<Vec<u8>>, StoreError>;
    /// Removes `node`'s snapshot of `room`; whether there was one.
    fn delete(&self, room: &RoomId, node: &NodeId) -> Result<bool, StoreError>;
    /// Every stored snapshot, encoded.
    fn all(&self) -> Result<Vec<Vec<u8>>, StoreError>;
}

/// Decodes a stored value (`None`: not a snapshot, which a store never holds).
pub fn decode(value: &[u8]) -> Option<StoredSnapshot> {
    ferry_room::decode(value).ok()
}

/// In memory (`--state-file none`, tests).
#[derive(Debug, Default)]
pub struct MemorySnapshots {
    values: Mutex<BTreeMap<(RoomId, NodeId), Vec<u8>>>,
}

impl MemorySnapshots {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(RoomId, NodeId), Vec<u8>>> {
        self.values.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RoomSnapshots for MemorySnapshots {
    fn put(&self, room: &RoomId, node: &NodeId, value: Vec<u8>) -> Result<(), StoreError> {
        self.lock().insert((room.clone(), node.clone()), value);
        Ok(())
    }

    fn get(&self, room: &RoomId) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self
            .lock()
            .iter()
            .filter(|((r, _), _)| r == room)
            .map(|(_, v)| v.clone())
            .collect())
    }

    fn delete(&self, room: &RoomId, node: &NodeId) -> Result<bool, StoreError> {
        Ok(self.lock().remove(&(room.clone(), node.clone())).is_some())
    }

    fn all(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self.lock().values().cloned().collect())
    }
}

/// A directory: `{dir}/r-{room}/n-{node}.snapshot` (the prefixes keep ids such as `..` plain
/// names), each written to a temporary file, fsynced and renamed over the old one.
#[derive(Debug, Clone)]
pub struct DirSnapshots {
    dir: PathBuf,
}

impl DirSnapshots {
    /// Snapshots under `dir` (created on the first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirSnapshots { dir: dir.into() }
    }

    fn room_dir(&self, room: &RoomId) -> PathBuf {
        self.dir.join(format!("r-{room}"))
    }

    fn io(path: &std::path::Path, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: path.to_owned(),
            source,
        }
    }

    fn read_dir(dir: &std::path::Path) -> Result<Vec<PathBuf>, StoreError> {
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                let mut out = Vec::new();
                for e in entries {
                    out.push(e.map_err(|e| Self::io(dir, e))?.path());
                }
                out.sort();
                Ok(out)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Self::io(dir, e)),
        }
    }

    fn values(dir: &std::path::Path) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut out = Vec::new();
        for p in Self::read_dir(dir)? {
            if p.extension().is_some_and(|x| x == "snapshot") {
                match std::fs::read(&p) {
                    Ok(v) => out.push(v),
                    // Removed meanwhile.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Self::io(&p, e)),
                }
            }
        }
        Ok(out)
    }
}

impl RoomSnapshots for DirSnapshots {
    fn put(&self, room: &RoomId, node: &NodeId, value: Vec<u8>) -> Result<(), StoreError> {
        let dir = self.room_dir(room);
        std::fs::create_dir_all(&dir).map_err(|e| Self::io(&dir, e))?;
        let path = dir.join(format!("n-{node}.snapshot"));
        let tmp = dir.join(format!("n-{node}.tmp"));
        let mut f = std::fs::File::create(&tmp).map_err(|e| Self::io(&tmp, e))?;
        f.write_all(&value).map_err(|e| Self::io(&tmp, e))?;
        f.sync_all().map_err(|e| Self::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Self::io(&path, e))
    }

    fn get(&self, room: &RoomId) -> Result<Vec<Vec<u8>>, StoreError> {
        Self::values(&self.room_dir(room))
    }

    fn delete(&self, room: &RoomId, node: &NodeId) -> Result<bool, StoreError> {
        let dir = self.room_dir(room);
        let path = dir.join(format!("n-{node}.snapshot"));
        let gone = match std::fs::remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Self::io(&path, e)),
        };
        // The room's directory goes with its last snapshot (fails while others remain).
        let _ = std::fs::remove_dir(&dir);
        Ok(gone)
    }

    fn all(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut out = Vec::new();
        for d in Self::read_dir(&self.dir)? {
            if d.is_dir() {
                out.extend(Self::values(&d)?);
            }
        }
        Ok(out)
    }
}

/// Why a snapshot call failed: 400 (a bad snapshot or id) or 503 (the store).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotApiError {
    /// The body is no snapshot of the room (400, or 413 when too large).
    #[error("{0}")]
    Bad(#[from] ferry_room::snapshot::SnapshotError),
    /// The store failed (503).
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Wall clock, ms since the epoch.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `PUT /v1/rooms/{room}/snapshots/{node}`: checks `body` (an encoded room state of `room`)
/// and stores it as `node`'s.
pub fn store(
    store: &dyn RoomSnapshots,
    room: &RoomId,
    node: &NodeId,
    body: &[u8],
) -> Result<(), SnapshotApiError> {
    let state = ferry_room::snapshot::check(room, body)?;
    let value = ferry_room::encode(&StoredSnapshot {
        node: node.clone(),
        saved_at_ms: unix_ms(),
        state,
    })
    .map_err(|e| StoreError::Invalid(format!("encoding the snapshot: {e}")))?;
    store.put(room, node, value)?;
    Ok(())
}

/// `GET /v1/rooms/{room}/snapshots`: every node's snapshot of `room`, encoded as one
/// `Vec<StoredSnapshot>` (empty when none).
pub fn fetch(store: &dyn RoomSnapshots, room: &RoomId) -> Result<Vec<u8>, SnapshotApiError> {
    let all: Vec<StoredSnapshot> = store.get(room)?.iter().filter_map(|v| decode(v)).collect();
    Ok(ferry_room::encode(&all)
        .map_err(|e| StoreError::Invalid(format!("encoding the snapshots: {e}")))?)
}

/// `GET /v1/room-snapshots`: what is stored, by room and node.
pub fn list(store: &dyn RoomSnapshots) -> Result<Vec<SnapshotInfo>, SnapshotApiError> {
    let mut out: Vec<SnapshotInfo> = store
        .all()?
        .iter()
        .filter_map(|v| {
            decode(v).map(|s| SnapshotInfo {
                room: s.state.room().clone(),
                node: s.node,
                bytes: v.len(),
                saved_at_ms: s.saved_at_ms,
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.room, &a.node).cmp(&(&b.room, &b.node)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stores() -> (Vec<Box<dyn RoomSnapshots>>, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "ferry-room-snapshots-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        (
            vec![
                Box::new(MemorySnapshots::default()),
                Box::new(DirSnapshots::new(&dir)),
            ],
            dir,
        )
    }

    #[test]
    fn stores_keep_one_snapshot_per_room_and_node() {
        let (stores, dir) = stores();
        let room = RoomId::new("..").unwrap();
        let other = RoomId::new("standup").unwrap();
        let (a, b) = (
            NodeId::new("node-a").unwrap(),
            NodeId::new("node-b").unwrap(),
        );
        for s in &stores {
            s.put(&room, &a, b"a1".to_vec()).unwrap();
            s.put(&room, &a, b"a2".to_vec()).unwrap();
            s.put(&room, &b, b"b1".to_vec()).unwrap();
            s.put(&other, &a, b"o1".to_vec()).unwrap();
            let mut got = s.get(&room).unwrap();
            got.sort();
            assert_eq!(got, vec![b"a2".to_vec(), b"b1".to_vec()], "{s:?}");
            assert_eq!(s.all().unwrap().len(), 3, "{s:?}");
            assert!(s.delete(&room, &a).unwrap());
            assert!(!s.delete(&room, &a).unwrap());
            assert_eq!(s.get(&room).unwrap(), vec![b"b1".to_vec()]);
            assert!(s.delete(&room, &b).unwrap());
            assert!(s.get(&room).unwrap().is_empty());
            assert_eq!(s.get(&other).unwrap(), vec![b"o1".to_vec()]);
        }
        // The id `..` stayed a plain name inside the directory.
        assert!(!dir.parent().unwrap().join("n-node-a.snapshot").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
