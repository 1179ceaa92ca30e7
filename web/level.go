package web

import (
	"log/slog"
	"net/http"
)

// levelFor logs server errors at error level and everything else at info.
func levelFor(status int) slog.Level {
	if status >= http.StatusInternalServerError {
		return slog.LevelError
	}
	return slog.LevelInfo
}
