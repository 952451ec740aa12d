module github.com/kemu-dev/kemu

go 1.26
