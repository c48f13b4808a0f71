//! Maglev hashing (Eisenbud et al., NSDI 2016), weighted: a comparison
//! policy.
//!
//! The table has a prime size `M` (at least 100 × nodes, as the paper
//! advises for ≤ 1 % imbalance). Node `i` has a permutation of the entries,
//! `offset_i + k · skip_i (mod M)`, from its id's hash; the nodes take turns
//! claiming their next free preferred entry until the table is full. Weights
//! set how often a node gets a turn (the paper's suggestion): each round a
//! node earns `w_i / max w` turns. A lookup is one table read, but any change
//! rebuilds the table and moves some keys between unaffected nodes too.

use ferry_proto::NodeId;

use super::hash::{Key, fastrange, mix64, str_hash};

const OFFSET_SALT: u64 = 0x6D61_676C_6576_2E6F;
const SKIP_SALT: u64 = 0x6D61_676C_6576_2E73;
const KEY_SALT: u64 = 0x6D61_676C_6576_2E6B;

/// A weighted Maglev lookup table.
#[derive(Clone, Debug)]
pub struct Maglev {
    table: Vec<u32>,
    nodes: Vec<NodeId>,
}

/// The smallest prime `≥ n` (n ≥ 2).
fn next_prime(n: usize) -> usize {
    let is_prime = |p: usize| {
        p >= 2
            && (2..)
                .take_while(|d| d * d <= p)
                .all(|d| !p.is_multiple_of(d))
    };
    (n.max(2)..).find(|&p| is_prime(p)).unwrap_or(2)
}

impl Maglev {
    /// Builds the table with at least `min_size` entries (rounded up to a
    /// prime, capped at 2^32). Weights are relative.
    pub fn new(nodes: &[(NodeId, f64)], min_size: usize) -> Maglev {
        let m = next_prime(min_size.clamp(2, u32::MAX as usize - 5));
        let mut table = vec![u32::MAX; m];
        let wmax = nodes.iter().map(|n| n.1).fold(0.0f64, f64::max);
        let live: Vec<(u32, usize, usize, f64)> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.1 > 0.0)
            .map(|(i, (id, w))| {
                let h = str_hash(id.as_str());
                let offset = (mix64(h ^ OFFSET_SALT) % m as u64) as usize;
                let skip = (mix64(h ^ SKIP_SALT) % (m as u64 - 1)) as usize + 1;
                (i as u32, offset, skip, w / wmax)
            })
            .collect();
        if !live.is_empty() {
            let mut pos: Vec<usize> = live.iter().map(|l| l.1).collect();
            let mut credit = vec![0.0f64; live.len()];
            let mut filled = 0;
            'fill: loop {
                for (k, &(owner, _, skip, share)) in live.iter().enumerate() {
                    credit[k] += share;
                    while credit[k] >= 1.0 {
                        credit[k] -= 1.0;
                        loop {
                            let c = pos[k];
                            pos[k] += skip;
                            if pos[k] >= m {
                                pos[k] -= m;
                            }
                            if table[c] == u32::MAX {
                                table[c] = owner;
                                break;
                            }
                        }
                        filled += 1;
                        if filled == m {
                            break 'fill;
                        }
                    }
                }
            }
        } else {
            table.clear();
        }
        Maglev {
            table,
            nodes: nodes.iter().map(|n| n.0.clone()).collect(),
        }
    }

    /// The table size `M`.
    pub fn size(&self) -> usize {
        self.table.len()
    }

    /// The node of a key.
    pub fn lookup(&self, key: &[u8]) -> Option<&NodeId> {
        self.lookup_key(Key::new(key))
    }

    /// [`Maglev::lookup`] for an already hashed key.
    #[inline]
    pub fn lookup_key(&self, key: Key) -> Option<&NodeId> {
        if self.table.is_empty() {
            return None;
        }
        let e = fastrange(mix64(key.0 ^ KEY_SALT), self.table.len() as u32);
        self.nodes.get(*self.table.get(e as usize)? as usize)
    }
}
