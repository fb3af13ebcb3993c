from sandbox.cli import main

raise SystemExit(main())
