//! The core's demultiplexing tables — client address → session, ICE ufrag → session, and the
//! forwarding pointers of sessions that moved away — as maps that can announce their keys.
//!
//! A node run as several shards behind one socket (`--workers N`, [`crate::cluster::shards`]) turns
//! announcing on: every key a shard starts or stops owning becomes a [`RouteChange`], which
//! the driver applies to the router that sends each datagram to its shard. A single core
//! announces nothing and pays nothing.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::SocketAddr;

use crate::cluster::shards::RouteChange;

/// A map whose key set changes can be announced.
#[derive(Debug)]
pub(crate) struct Announced<K, V> {
    map: HashMap<K, V>,
    /// `(key, owned)` since the last [`Announced::take_changes`]; `None`: not announcing.
    changes: Option<Vec<(K, bool)>>,
}

impl<K, V> Default for Announced<K, V> {
    fn default() -> Self {
        Announced {
            map: HashMap::new(),
            changes: None,
        }
    }
}

impl<K: Hash + Eq + Clone, V> Announced<K, V> {
    /// Starts recording key changes (the keys held now are announced first).
    pub(crate) fn announce(&mut self) {
        self.changes = Some(self.map.keys().map(|k| (k.clone(), true)).collect());
    }

    /// Inserts; a new key is announced.
    pub(crate) fn insert(&mut self, k: K, v: V) -> Option<V> {
        if let Some(c) = self.changes.as_mut()
            && !self.map.contains_key(&k)
        {
            c.push((k.clone(), true));
        }
        self.map.insert(k, v)
    }

    /// Removes; a removed key is announced.
    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        let v = self.map.remove(k);
        if v.is_some()
            && let Some(c) = self.changes.as_mut()
        {
            c.push((k.clone(), false));
        }
        v
    }

    /// Keeps what `keep` accepts; removed keys are announced.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        match self.changes.as_mut() {
            None => self.map.retain(keep),
            Some(c) => self.map.retain(|k, v| {
                let kept = keep(k, v);
                if !kept {
                    c.push((k.clone(), false));
                }
                kept
            }),
        }
    }

    /// The value of `k`, to change in place (the key set stays).
    pub(crate) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map.get_mut(k)
    }

    /// Changes recorded since the last call, mapped into `out`.
    pub(crate) fn take_changes(
        &mut self,
        out: &mut Vec<RouteChange>,
        f: impl Fn(K, bool) -> RouteChange,
    ) {
        if let Some(c) = self.changes.as_mut() {
            out.extend(c.drain(..).map(|(k, owned)| f(k, owned)));
        }
    }
}

impl<K, V> std::ops::Deref for Announced<K, V> {
    type Target = HashMap<K, V>;

    fn deref(&self) -> &HashMap<K, V> {
        &self.map
    }
}

/// Address-keyed tables.
pub(crate) type ByAddr<V> = Announced<SocketAddr, V>;
/// Ufrag-keyed tables.
pub(crate) type ByUfrag<V> = Announced<String, V>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announces_new_and_removed_keys_only_once_turned_on() {
        let mut m: ByUfrag<u32> = Announced::default();
        m.insert("quiet".into(), 1);
        let mut out = Vec::new();
        m.take_changes(&mut out, RouteChange::Ufrag);
        assert!(out.is_empty());
        m.announce();
        m.insert("a".into(), 2);
        m.insert("a".into(), 3); // same key: nothing new
        m.remove(&"missing".to_string());
        m.retain(|k, _| k != "quiet");
        m.take_changes(&mut out, RouteChange::Ufrag);
        assert_eq!(
            out,
            vec![
                RouteChange::Ufrag("quiet".into(), true),
                RouteChange::Ufrag("a".into(), true),
                RouteChange::Ufrag("quiet".into(), false),
            ]
        );
        out.clear();
        m.take_changes(&mut out, RouteChange::Ufrag);
        assert!(out.is_empty());
    }
}
