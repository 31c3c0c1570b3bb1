//! The discrete-event simulator that runs the library's scheduler on virtual hosts, links and switches. Not built yet.
