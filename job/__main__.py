from job.cli import main

raise SystemExit(main())
