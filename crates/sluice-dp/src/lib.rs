//! The software NIC: ports, packet parsing, classifier, engines, statistics and control. Not built yet (issue 5).
