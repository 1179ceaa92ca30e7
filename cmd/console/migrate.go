package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"

	"github.com/taskgate/taskgate/migrations"
)

// runMigrate implements "console migrate up | down N | status".
func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var dbf dbFlags
	dbf.register(fs, getenv)
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console migrate up | down N | status [OPTIONS]")
		fmt.Fprintln(stdout, "  up        apply every pending migration")
		fmt.Fprintln(stdout, "  down N    roll back the newest N applied migrations")
		fmt.Fprintln(stdout, "  status    list every migration and whether it is applied")
		fmt.Fprintln(stdout, "Options:")
		fs.PrintDefaults()
	}
	pos, help, err := parseFlags(fs, args)
	if help {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return fmt.Errorf("migrate: want up, down N or status")
	}
	n := 0
	switch pos[0] {
	case "up", "status":
		if len(pos) != 1 {
			return fmt.Errorf("migrate %s takes no argument", pos[0])
		}
	case "down":
		if len(pos) != 2 {
			return fmt.Errorf("migrate down: want the number of migrations to roll back")
		}
		if n, err = strconv.Atoi(pos[1]); err != nil || n < 1 {
			return fmt.Errorf("migrate down: %q is not a positive number", pos[1])
		}
	default:
		fs.Usage()
		return fmt.Errorf("migrate: unknown action %q", pos[0])
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := openDatabase(ctx, dbf, logger)
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := migrations.NewRunner(db.Pool)
	if err != nil {
		return err
	}
	defer r.Close()
	switch pos[0] {
	case "up":
		done, err := r.Up(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "applied %d migration(s)\n", done)
	case "down":
		done, err := r.Down(ctx, n)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rolled back %d migration(s)\n", done)
	case "status":
		st, err := r.Status(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tNAME\tSTATE\tAPPLIED AT")
		for _, s := range st {
			state, at := "pending", "-"
			if s.Applied {
				state, at = "applied", s.AppliedAt
			}
			fmt.Fprintf(tw, "%05d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
		}
		return tw.Flush()
	}
	return nil
}
