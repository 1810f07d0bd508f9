//! The subsystems attached to a device, kept by type: the device core names none of them.

use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex, OnceLock};

use crate::signal::lock;

// Note [Services attach to the device]
// The device core (`context.rs`) owns what every subsystem shares: the device, queue, lane,
// completion tracker, limits, budget and mapping leases. It names no subsystem. The heap, its
// scope tree, the host cache, the profiler, the pipeline cache and the settings they read at the
// open each attach themselves here, under their own type, on first use, and live as long as the
// device: so the core imports none of them, and each imports the core. A service never holds a
// strong `Gpu` (the device would then never close); it holds what it needs of the core, or a
// `Weak`. Lookups take no lock (one atomic load per attached service), so a hot path may ask for
// the profiler on every submission.

/// More kinds of service than the crate defines; reaching it is a bug in the crate.
const CAPACITY: usize = 16;

/// Services of one device, by type.
pub(crate) struct Services {
    slots: [OnceLock<(TypeId, Box<dyn Any + Send + Sync>)>; CAPACITY],
    /// Serialises attaching, so a type is attached once.
    attach: Mutex<()>,
}

impl Default for Services {
    fn default() -> Self {
        Services { slots: std::array::from_fn(|_| OnceLock::new()), attach: Mutex::new(()) }
    }
}

impl Services {
    /// The service of type `T`, if attached.
    #[inline]
    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<&Arc<T>> {
        let wanted = TypeId::of::<T>();
        for slot in &self.slots {
            // Slots fill in order, so the first empty one ends the search.
            let (id, service) = slot.get()?;
            if *id == wanted {
                return service.downcast_ref::<Arc<T>>();
            }
        }
        None
    }

    /// The service of type `T`, attaching `make()`'s on first use. `make` runs outside the lock
    /// (it may attach services of its own); when two threads race, the first to attach wins and
    /// the other's value is dropped. The flag is true for the caller whose value was attached.
    pub(crate) fn try_get_or_attach<T: Send + Sync + 'static, E>(
        &self,
        make: impl FnOnce() -> Result<Arc<T>, E>,
    ) -> Result<(&Arc<T>, bool), E> {
        if let Some(service) = self.get::<T>() {
            return Ok((service, false));
        }
        let made = make()?;
        let _attaching = lock(&self.attach);
        if let Some(service) = self.get::<T>() {
            return Ok((service, false));
        }
        let Some(slot) = self.slots.iter().find(|s| s.get().is_none()) else {
            unreachable!("more than {CAPACITY} kinds of device service")
        };
        let _ = slot.set((TypeId::of::<T>(), Box::new(made)));
        Ok((self.get::<T>().expect("attached above"), true))
    }

    /// The service of type `T`, attaching `make()`'s on first use.
    pub(crate) fn get_or_attach<T: Send + Sync + 'static>(&self, make: impl FnOnce() -> Arc<T>) -> &Arc<T> {
        match self.try_get_or_attach(|| Ok::<_, std::convert::Infallible>(make())) {
            Ok((service, _)) => service,
            Err(never) => match never {},
        }
    }

    /// Attaches `value` as the service of type `T` unless one is attached already.
    pub(crate) fn attach<T: Send + Sync + 'static>(&self, value: T) {
        self.get_or_attach(|| Arc::new(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Counter(std::sync::atomic::AtomicU32);
    struct Named(&'static str);

    #[test]
    fn each_type_is_attached_once_and_found_by_type() {
        let services = Services::default();
        assert!(services.get::<Counter>().is_none());
        let first = services.get_or_attach(|| Arc::new(Counter::default())).clone();
        first.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        services.attach(Named("a"));
        services.attach(Named("b"));
        assert_eq!(services.get::<Named>().unwrap().0, "a", "a second attach keeps the first");
        assert!(Arc::ptr_eq(services.get::<Counter>().unwrap(), &first));
        let (again, attached) = services.try_get_or_attach(|| Ok::<_, ()>(Arc::new(Counter::default()))).unwrap();
        assert!(!attached && again.0.load(std::sync::atomic::Ordering::Relaxed) == 1);
        assert_eq!(services.try_get_or_attach::<u8, _>(|| Err("refused")).unwrap_err(), "refused");
        assert!(services.get::<u8>().is_none(), "a failed make attaches nothing");
    }

    #[test]
    fn racing_attaches_agree_on_one_value() {
        let services = Arc::new(Services::default());
        let seen: Vec<usize> = (0..8)
            .map(|_| {
                let services = services.clone();
                std::thread::spawn(move || {
                    Arc::as_ptr(services.get_or_attach(|| Arc::new(Counter::default()))) as usize
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(seen.windows(2).all(|w| w[0] == w[1]));
    }
}
