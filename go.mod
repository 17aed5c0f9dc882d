module knotless.dev/knotless

go 1.26.0
