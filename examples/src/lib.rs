//! Examples live as `[[example]]` targets of this package.
