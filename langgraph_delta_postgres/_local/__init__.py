"""What the command line (:mod:`..cli`) and the benchmark (:mod:`..bench`) share, so that
neither imports the other: a local Postgres (:mod:`.embedded`, the ``embedded`` extra), a
hot standby of a server (:mod:`.standby`), the watchdog that stops either when the process
that started it dies (:mod:`.watchdog`), the install hints of the extras (:mod:`.install`)
and the example graphs the demo, the benchmark and the tests run (:mod:`.workloads`). Not
part of the library's API."""
