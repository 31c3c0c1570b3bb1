//! Policy files: TOML descriptions of a scheduler, compiled to a [`crate::TreeBuilder`].
