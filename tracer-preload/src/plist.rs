//! A list of per-thread buffers (syscall rings, allocation lanes) that only
//! grows: its nodes live as long as the process, so any thread may hold a
//! `&'static` one, and adding a node is one compare-and-swap on the head.

use core::sync::atomic::{AtomicPtr, Ordering};

/// A node of a [`List`]: it holds the link to the next one.
pub trait Node: Sync + Sized + 'static {
    fn next(&self) -> &AtomicPtr<Self>;
}

pub struct List<T: Node> {
    head: AtomicPtr<T>,
}

impl<T: Node> List<T> {
    pub const fn new() -> List<T> {
        List {
            head: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// Adds `node`, which is never freed, at the front.
    pub fn push(&self, node: &'static T) {
        let p = node as *const T as *mut T;
        let mut first = self.head.load(Ordering::Acquire);
        loop {
            node.next().store(first, Ordering::Relaxed);
            match self
                .head
                .compare_exchange_weak(first, p, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => first = now,
            }
        }
    }

    /// Every node, the last added first.
    pub fn iter(&self) -> impl Iterator<Item = &'static T> {
        let mut p = self.head.load(Ordering::Acquire);
        core::iter::from_fn(move || {
            if p.is_null() {
                return None;
            }
            // SAFETY: nodes are pushed as `&'static` and never freed.
            let n = unsafe { &*p };
            p = n.next().load(Ordering::Acquire);
            Some(n)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct N(u32, AtomicPtr<N>);

    impl Node for N {
        fn next(&self) -> &AtomicPtr<N> {
            &self.1
        }
    }

    #[test]
    fn nodes_pushed_from_threads_are_all_listed() {
        static L: List<N> = List::new();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..250 {
                        L.push(Box::leak(Box::new(N(t * 1000 + i, AtomicPtr::default()))));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut got: Vec<u32> = L.iter().map(|n| n.0).collect();
        got.sort_unstable();
        let want: Vec<u32> = (0..4)
            .flat_map(|t| (0..250).map(move |i| t * 1000 + i))
            .collect();
        assert_eq!(got, want);
    }
}
