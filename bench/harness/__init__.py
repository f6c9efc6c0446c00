"""What every benchmark shares: the project set up (:mod:`.project`), a server started and stopped
(:mod:`.server`), the HTTP driver (:mod:`.http`), the datasets (:mod:`.datasets`), a throwaway tenant
(:mod:`.throwaway`), timing statistics (:mod:`.stats`), the result files (:mod:`.results`), the printed
tables (:mod:`.tables`) and PostgreSQL's own view of a search (:mod:`.postgres`).

A benchmark imports the parts it uses (``from bench.harness import results, server``); nothing here
imports a benchmark, and project code only inside functions, after :func:`.project.setup_django`."""
