package local

import (
	"fmt"
	"os"
	"sync"
)

// maxSerialLog bounds --serial-log's file: the guest writes it.
const maxSerialLog = 256 << 20

// serialLog is --serial-log: the guest's serial output appended to a file
// as it arrives, up to maxSerialLog, then one line saying the rest was
// dropped. Writes never fail (the console's reader must not stop).
type serialLog struct {
	mu      sync.Mutex
	f       *os.File
	max     int64 // maxSerialLog
	written int64
	err     error
}

func openSerialLog(file string) (*serialLog, error) {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o666)
	if err != nil {
		return nil, fmt.Errorf("--serial-log: %w", err)
	}
	return &serialLog{f: f, max: maxSerialLog}, nil
}

func (s *serialLog) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil || s.err != nil || s.written >= s.max {
		return len(b), nil
	}
	chunk := b[:min(int64(len(b)), s.max-s.written)]
	n, err := s.f.Write(chunk)
	s.written += int64(n)
	if err != nil {
		s.err = err
	} else if s.written >= s.max {
		_, _ = fmt.Fprintf(s.f, "\n[kemuctl: serial log truncated at %d bytes]\n", s.max)
	}
	return len(b), nil
}

// Close closes the file and returns the first write error.
func (s *serialLog) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return s.err
	}
	err := s.f.Close()
	s.f = nil
	if s.err != nil {
		err = s.err
	}
	if err != nil {
		return fmt.Errorf("--serial-log: %w", err)
	}
	return nil
}
