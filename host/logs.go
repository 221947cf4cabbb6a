package host

import (
	"encoding/json"

	"github.com/hashicorp/go-hclog"
)

// logLine re-emits one hclog JSON line at its level, with its fields; anything else at info.
func logLine(log hclog.Logger, line []byte) {
	var entry map[string]any
	if err := json.Unmarshal(line, &entry); err != nil {
		log.Info(string(line))
		return
	}
	msg, _ := entry["@message"].(string)
	level, _ := entry["@level"].(string)
	args := make([]any, 0, 2*len(entry))
	for k, v := range entry {
		if len(k) > 0 && k[0] == '@' {
			continue
		}
		args = append(args, k, v)
	}
	log.Log(hclog.LevelFromString(level), msg, args...)
}
