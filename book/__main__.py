from book.site import main

raise SystemExit(main())
