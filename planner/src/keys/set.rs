//! Key sets: unions of PartitionKey × RowKey boxes, with intersection,
//! union and a normal form that keeps them few and sorted (merged where
//! two boxes unite into one, widened to their hull past a cap).

use std::ops::Bound;

use tablegate_catalog::Role;
use tablegate_store::{CmpOp, KeyBox, KeyInterval};

/// More boxes than this and the planner stops splitting hairs: the span
/// becomes the hull of the boxes (still correct, less precise).
const MAX_BOXES: usize = 1024;

/// A union of key boxes.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySet {
    /// The boxes; empty means no key.
    pub boxes: Vec<KeyBox>,
    /// True when the boxes were widened (a superset of the keys): the
    /// predicate that produced them must stay in the residual.
    pub lossy: bool,
}

/// Do two intervals overlap or touch, so that their union is an interval?
fn joinable(a: &KeyInterval, b: &KeyInterval) -> bool {
    let touches = |hi: &Bound<String>, lo: &Bound<String>| match (hi, lo) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => true,
        (Bound::Included(h), Bound::Included(l)) => h >= l,
        (Bound::Included(h), Bound::Excluded(l)) | (Bound::Excluded(h), Bound::Included(l)) => {
            h >= l
        }
        (Bound::Excluded(h), Bound::Excluded(l)) => h > l,
    };
    touches(&a.hi, &b.lo) && touches(&b.hi, &a.lo)
}

/// The keys `key op v` names, as intervals (`<>` is two).
pub(super) fn interval_for(op: CmpOp, v: &str) -> Vec<KeyInterval> {
    let s = v.to_owned();
    match op {
        CmpOp::Eq => vec![KeyInterval::point(s)],
        CmpOp::Lt => vec![KeyInterval::new(Bound::Unbounded, Bound::Excluded(s))],
        CmpOp::Le => vec![KeyInterval::new(Bound::Unbounded, Bound::Included(s))],
        CmpOp::Gt => vec![KeyInterval::new(Bound::Excluded(s), Bound::Unbounded)],
        CmpOp::Ge => vec![KeyInterval::new(Bound::Included(s), Bound::Unbounded)],
        CmpOp::Ne => vec![
            KeyInterval::new(Bound::Unbounded, Bound::Excluded(s.clone())),
            KeyInterval::new(Bound::Excluded(s), Bound::Unbounded),
        ],
    }
}

impl KeySet {
    /// Every key.
    pub fn all() -> Self {
        KeySet {
            boxes: vec![KeyBox::all()],
            lossy: false,
        }
    }

    /// No key.
    pub fn none() -> Self {
        KeySet {
            boxes: Vec::new(),
            lossy: false,
        }
    }

    /// The set of `intervals` on one key, the other key unconstrained.
    pub(super) fn on(role: Role, intervals: Vec<KeyInterval>) -> Self {
        let mut s = KeySet {
            lossy: false,
            boxes: intervals
                .into_iter()
                .map(|i| match role {
                    Role::PartitionKey => KeyBox {
                        pk: i,
                        rk: KeyInterval::all(),
                    },
                    _ => KeyBox {
                        pk: KeyInterval::all(),
                        rk: i,
                    },
                })
                .collect(),
        };
        s.normalize();
        s
    }

    /// True when the set is every key.
    pub fn is_all(&self) -> bool {
        self.boxes.iter().any(|b| b == &KeyBox::all())
    }

    /// Set intersection.
    pub fn and(&self, other: &KeySet) -> KeySet {
        let mut boxes = Vec::new();
        for a in &self.boxes {
            for b in &other.boxes {
                let x = KeyBox {
                    pk: a.pk.intersect(&b.pk),
                    rk: a.rk.intersect(&b.rk),
                };
                if !x.pk.is_empty() && !x.rk.is_empty() {
                    boxes.push(x);
                }
            }
        }
        let mut s = KeySet {
            boxes,
            lossy: self.lossy || other.lossy,
        };
        s.normalize();
        s
    }

    /// Set union.
    pub fn or(&self, other: &KeySet) -> KeySet {
        let mut boxes = self.boxes.clone();
        boxes.extend(other.boxes.iter().cloned());
        let mut s = KeySet {
            boxes,
            lossy: self.lossy || other.lossy,
        };
        s.normalize();
        s
    }

    /// Drops empty and duplicate boxes, merges boxes that differ in one
    /// dimension only where their union is one box, and caps the count.
    pub fn normalize(&mut self) {
        self.boxes.retain(|b| !b.pk.is_empty() && !b.rk.is_empty());
        // '' is the smallest key: `>= ''` is no bound at all, and
        // `<= ''` is the point ''.
        for b in &mut self.boxes {
            for i in [&mut b.pk, &mut b.rk] {
                let empty = |x: &Bound<String>| matches!(x, Bound::Included(s) if s.is_empty());
                if empty(&i.hi) {
                    *i = KeyInterval::point("");
                } else if empty(&i.lo) {
                    i.lo = Bound::Unbounded;
                }
            }
        }
        if self.is_all() {
            self.boxes = vec![KeyBox::all()];
            return;
        }
        self.boxes.sort_by_key(box_order);
        self.boxes.dedup();
        if self.boxes.len() <= EXHAUSTIVE_MERGE {
            // Small sets: merge every pair that unites into one box.
            while let Some((i, j, u)) = self.find_merge() {
                self.boxes[i] = u;
                self.boxes.remove(j);
            }
        } else {
            // Large sets (a long IN list): one pass over sorted neighbours,
            // O(n log n) overall, so a huge list cannot stall the planner.
            let mut out: Vec<KeyBox> = Vec::with_capacity(self.boxes.len());
            for b in std::mem::take(&mut self.boxes) {
                match out.last().and_then(|a| union_of(a, &b)) {
                    Some(u) => *out.last_mut().expect("non-empty") = u,
                    None => out.push(b),
                }
            }
            self.boxes = out;
        }
        if self.boxes.len() > MAX_BOXES {
            // Too fine-grained to be worth it: keep the hull, which is a
            // superset — the set is no longer exact, and says so.
            let pk = self
                .boxes
                .iter()
                .map(|b| b.pk.clone())
                .reduce(|a, b| a.hull(&b));
            self.boxes = vec![KeyBox {
                pk: pk.unwrap_or_else(KeyInterval::all),
                rk: KeyInterval::all(),
            }];
            self.lossy = true;
        }
        self.boxes.sort_by_key(box_order);
    }
}

/// Sets up to this size are merged pairwise (quadratic, precise).
const EXHAUSTIVE_MERGE: usize = 64;

/// The one box covering `a` and `b`, when there is one.
fn union_of(a: &KeyBox, b: &KeyBox) -> Option<KeyBox> {
    if a.rk == b.rk && joinable(&a.pk, &b.pk) {
        Some(KeyBox {
            pk: a.pk.hull(&b.pk),
            rk: a.rk.clone(),
        })
    } else if a.pk == b.pk && a.pk.as_point().is_some() && joinable(&a.rk, &b.rk) {
        Some(KeyBox {
            pk: a.pk.clone(),
            rk: a.rk.hull(&b.rk),
        })
    } else {
        None
    }
}

impl KeySet {
    fn find_merge(&self) -> Option<(usize, usize, KeyBox)> {
        for i in 0..self.boxes.len() {
            for j in i + 1..self.boxes.len() {
                if let Some(u) = union_of(&self.boxes[i], &self.boxes[j]) {
                    return Some((i, j, u));
                }
            }
        }
        None
    }
}

fn box_order(b: &KeyBox) -> (u8, String, u8, String) {
    let key = |bound: &Bound<String>| match bound {
        Bound::Unbounded => (0, String::new()),
        Bound::Included(s) => (1, s.clone()),
        Bound::Excluded(s) => (2, s.clone()),
    };
    let (a, s) = key(&b.pk.lo);
    let (c, t) = key(&b.rk.lo);
    (a, s, c, t)
}
