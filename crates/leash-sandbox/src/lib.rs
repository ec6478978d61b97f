//! leash's Linux sandbox: namespaces whose only way out is leash's proxy. The only crate where `unsafe` may appear.
