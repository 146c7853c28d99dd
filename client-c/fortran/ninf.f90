! ninf.f90: the grid from Fortran. An ISO_C_BINDING module over libninf's GridRPC API
! (grpc.h): the library's functions, its error codes, function handles, and grpc_call and
! Ninf_call for the argument shapes of the standard routines (any other routine through
! grpc_call_args, an array of C_LOC pointers in the routine's IDL order).
!
!     use ninf
!     type(grpc_function_handle) :: h
!     if (grpc_initialize() /= GRPC_NO_ERROR) stop 1        ! the grid file `ninf up` wrote
!     if (grpc_function_handle_default(h, "dgesv") /= GRPC_NO_ERROR) stop 1
!     if (grpc_call(h, a, n, ipvt, b) /= GRPC_NO_ERROR) print *, ninf_error_message()
!
! Compile it with the program and link libninf:
!     gfortran PREFIX/include/ninf.f90 prog.f90 $(pkg-config --libs ninf)
!
! IDL `int` is integer(c_int), `double` real(c_double); arrays are Fortran's own, column-major
! as the IDL declares them, and must be contiguous. Calls are blocking: the arrays are read
! and written in place before grpc_call returns.
module ninf
    use, intrinsic :: iso_c_binding
    implicit none
    private

    ! GridRPC's error codes, as grpc.h numbers them.
    integer(c_int), parameter, public :: GRPC_NO_ERROR = 0, GRPC_NOT_INITIALIZED = 1, &
        GRPC_ALREADY_INITIALIZED = 2, GRPC_CONFIGFILE_NOT_FOUND = 3, GRPC_CONFIGFILE_ERROR = 4, &
        GRPC_SERVER_NOT_FOUND = 5, GRPC_FUNCTION_NOT_FOUND = 6, GRPC_INVALID_FUNCTION_HANDLE = 7, &
        GRPC_INVALID_SESSION_ID = 8, GRPC_RPC_REFUSED = 9, GRPC_COMMUNICATION_FAILED = 10, &
        GRPC_SESSION_FAILED = 11, GRPC_NOT_COMPLETED = 12, GRPC_NONE_COMPLETED = 13, &
        GRPC_OTHER_ERROR_CODE = 14, GRPC_UNKNOWN_ERROR_CODE = 15, GRPC_LAST_ERROR_CODE = 16
    ! Ninf_call's results, as ninf.h has them.
    integer(c_int), parameter, public :: NINF_OK = 0, NINF_ERROR = -1

    ! grpc_function_handle_t: one pointer the library owns.
    type, bind(c), public :: grpc_function_handle
        type(c_ptr) :: ninf_private = c_null_ptr
    end type

    public :: grpc_initialize, grpc_finalize, grpc_function_handle_default, &
        grpc_function_handle_init, grpc_function_handle_destruct, grpc_call, grpc_call_args, &
        grpc_error_string, ninf_error_message, Ninf_call

    ! grpc_call(handle, ...): by the routine's argument shapes.
    interface grpc_call
        module procedure call_n_a_b_c, call_a_n_ipvt, call_a_n_ipvt_b, call_n_x_y_r, call_n_x_r
    end interface

    ! Ninf_call(name, ...): the routine by name, placed by the metaserver.
    interface Ninf_call
        module procedure ninf_n_a_b_c, ninf_a_n_ipvt, ninf_a_n_ipvt_b, ninf_n_x_y_r, ninf_n_x_r
    end interface

    interface
        function c_initialize(path) bind(c, name="grpc_initialize") result(code)
            import :: c_ptr, c_int
            type(c_ptr), value :: path
            integer(c_int) :: code
        end function
        function c_finalize() bind(c, name="grpc_finalize") result(code)
            import :: c_int
            integer(c_int) :: code
        end function
        function c_handle_default(handle, name) bind(c, name="grpc_function_handle_default") &
                result(code)
            import :: c_ptr, c_int, c_char
            type(c_ptr), value :: handle
            character(kind=c_char), dimension(*) :: name
            integer(c_int) :: code
        end function
        function c_handle_init(handle, server, name) bind(c, name="grpc_function_handle_init") &
                result(code)
            import :: c_ptr, c_int, c_char
            type(c_ptr), value :: handle
            character(kind=c_char), dimension(*) :: server, name
            integer(c_int) :: code
        end function
        function c_handle_destruct(handle) bind(c, name="grpc_function_handle_destruct") &
                result(code)
            import :: c_ptr, c_int
            type(c_ptr), value :: handle
            integer(c_int) :: code
        end function
        function c_stack_new(size) bind(c, name="grpc_arg_stack_new") result(stack)
            import :: c_ptr, c_int
            integer(c_int), value :: size
            type(c_ptr) :: stack
        end function
        function c_stack_push(stack, arg) bind(c, name="grpc_arg_stack_push_arg") result(code)
            import :: c_ptr, c_int
            type(c_ptr), value :: stack, arg
            integer(c_int) :: code
        end function
        function c_stack_destruct(stack) bind(c, name="grpc_arg_stack_destruct") result(code)
            import :: c_ptr, c_int
            type(c_ptr), value :: stack
            integer(c_int) :: code
        end function
        function c_call_argstack(handle, stack) bind(c, name="grpc_call_argstack") result(code)
            import :: c_ptr, c_int
            type(c_ptr), value :: handle, stack
            integer(c_int) :: code
        end function
        function c_error_string(code) bind(c, name="grpc_error_string") result(text)
            import :: c_ptr, c_int
            integer(c_int), value :: code
            type(c_ptr) :: text
        end function
        function c_error_message() bind(c, name="ninf_error_message") result(text)
            import :: c_ptr
            type(c_ptr) :: text
        end function
        function c_function(name) bind(c, name="ninf_function") result(handle)
            import :: c_ptr, c_char
            character(kind=c_char), dimension(*) :: name
            type(c_ptr) :: handle
        end function
        function c_strlen(text) bind(c, name="strlen") result(length)
            import :: c_ptr, c_size_t
            type(c_ptr), value :: text
            integer(c_size_t) :: length
        end function
    end interface

contains

    ! A Fortran string as C wants it: trailing blanks dropped, NUL-terminated.
    pure function c_text(text) result(c)
        character(len=*), intent(in) :: text
        character(kind=c_char, len=len_trim(text) + 1) :: c
        c = trim(text) // c_null_char
    end function

    ! A C string the library keeps, as a Fortran string.
    function f_text(text) result(f)
        type(c_ptr), intent(in) :: text
        character(len=:), allocatable :: f
        character(kind=c_char), pointer :: chars(:)
        integer :: i, n
        if (.not. c_associated(text)) then
            f = ""
            return
        end if
        n = int(c_strlen(text))
        call c_f_pointer(text, chars, [n])
        allocate(character(len=n) :: f)
        do i = 1, n
            f(i:i) = chars(i)
        end do
    end function

    ! grpc_initialize([path]): the grid file `path`, or without it the default one.
    function grpc_initialize(path) result(code)
        character(len=*), intent(in), optional :: path
        integer(c_int) :: code
        character(kind=c_char, len=:), allocatable, target :: c
        if (present(path)) then
            c = c_text(path)
            code = c_initialize(c_loc(c))
        else
            code = c_initialize(c_null_ptr)
        end if
    end function

    function grpc_finalize() result(code)
        integer(c_int) :: code
        code = c_finalize()
    end function

    function grpc_function_handle_default(handle, name) result(code)
        type(grpc_function_handle), intent(inout), target :: handle
        character(len=*), intent(in) :: name
        integer(c_int) :: code
        code = c_handle_default(c_loc(handle), c_text(name))
    end function

    function grpc_function_handle_init(handle, server, name) result(code)
        type(grpc_function_handle), intent(inout), target :: handle
        character(len=*), intent(in) :: server, name
        integer(c_int) :: code
        code = c_handle_init(c_loc(handle), c_text(server), c_text(name))
    end function

    function grpc_function_handle_destruct(handle) result(code)
        type(grpc_function_handle), intent(inout), target :: handle
        integer(c_int) :: code
        code = c_handle_destruct(c_loc(handle))
    end function

    function grpc_error_string(code) result(text)
        integer(c_int), intent(in) :: code
        character(len=:), allocatable :: text
        text = f_text(c_error_string(code))
    end function

    ! What the calling thread's last failure met, in words (the argument's name and size,
    ! the routine's own message).
    function ninf_error_message() result(text)
        character(len=:), allocatable :: text
        text = f_text(c_error_message())
    end function

    ! Calls the routine behind the C handle pointer `handle` with `args` in IDL order.
    function call_pointers(handle, args) result(code)
        type(c_ptr), intent(in) :: handle
        type(c_ptr), intent(in) :: args(:)
        integer(c_int) :: code, ignored
        type(c_ptr) :: stack
        integer :: i
        stack = c_stack_new(int(size(args), c_int))
        if (.not. c_associated(stack)) then
            code = GRPC_OTHER_ERROR_CODE
            return
        end if
        do i = 1, size(args)
            code = c_stack_push(stack, args(i))
            if (code /= GRPC_NO_ERROR) then
                ignored = c_stack_destruct(stack)
                return
            end if
        end do
        code = c_call_argstack(handle, stack)
        ignored = c_stack_destruct(stack)
    end function

    ! Any routine: `args` are C_LOC of each argument in the IDL's order (scalars too).
    function grpc_call_args(handle, args) result(code)
        type(grpc_function_handle), intent(inout), target :: handle
        type(c_ptr), intent(in) :: args(:)
        integer(c_int) :: code
        code = call_pointers(c_loc(handle), args)
    end function

    ! Ninf_call's handle for `name`, or a null pointer (Ninf_error says why).
    function named(name) result(handle)
        character(len=*), intent(in) :: name
        type(c_ptr) :: handle
        handle = c_function(c_text(name))
    end function

    function ninf_result(code) result(result)
        integer(c_int), intent(in) :: code
        integer(c_int) :: result
        result = merge(NINF_OK, NINF_ERROR, code == GRPC_NO_ERROR)
    end function

    ! mmul(n, A, B, C) and its kind: an order and three matrices.
    function call_n_a_b_c(handle, n, a, b, c) result(code)
        type(grpc_function_handle), intent(inout), target :: handle
        integer(c_int), intent(in), target :: n
        real(c_double), intent(in), target, contiguous :: a(:, :), b(:, :)
        real(c_double), intent(inout), target, contiguous :: c(:, :)
        integer(c_int) :: code
        code = call_pointers(c_loc(handle), [c_loc(n), c_loc(a), c_loc(b), c_loc(c)])
    end function

    ! dgefa(a, n, ipvt): a matrix factored in place and its pivots.
    function call_a_n_ipvt(handle, a, n, ipvt) result(code)
        type(grpc_function_handle), intent(inout), target :: handle
        real(c_double), intent(inout), target, contiguous :: a(:, :)
        integer(c_int), intent(in), target :: n
        integer(c_int), intent(inout), target, contiguous :: ipvt(:)
        integer(c_int) :: code
        code = call_pointers(c_loc(handle), [c_loc(a), c_loc(n), c_loc(ipvt)])
    end function

    ! dgesl(a, n, ipvt, b), dgesv(a, n, ipvt, b): a system solved in b.
    function call_a_n_ipvt_b(handle, a, n, ipvt, b) result(code)
        type(grpc_function_handle), intent(inout), target :: handle
        real(c_double), intent(inout), target, contiguous :: a(:, :)
        integer(c_int), intent(in), target :: n
        integer(c_int), intent(inout), target, contiguous :: ipvt(:)
        real(c_double), intent(inout), target, contiguous :: b(:)
        integer(c_int) :: code
        code = call_pointers(c_loc(handle), [c_loc(a), c_loc(n), c_loc(ipvt), c_loc(b)])
    end function

    ! ddot(n, x, y, result): two vectors and a one-element result.
    function call_n_x_y_r(handle, n, x, y, r) result(code)
        type(grpc_function_handle), intent(inout), target :: handle
        integer(c_int), intent(in), target :: n
        real(c_double), intent(in), target, contiguous :: x(:), y(:)
        real(c_double), intent(inout), target, contiguous :: r(:)
        integer(c_int) :: code
        code = call_pointers(c_loc(handle), [c_loc(n), c_loc(x), c_loc(y), c_loc(r)])
    end function

    ! dnrm2(n, x, result): a vector and a one-element result.
    function call_n_x_r(handle, n, x, r) result(code)
        type(grpc_function_handle), intent(inout), target :: handle
        integer(c_int), intent(in), target :: n
        real(c_double), intent(in), target, contiguous :: x(:)
        real(c_double), intent(inout), target, contiguous :: r(:)
        integer(c_int) :: code
        code = call_pointers(c_loc(handle), [c_loc(n), c_loc(x), c_loc(r)])
    end function

    function ninf_n_a_b_c(name, n, a, b, c) result(result)
        character(len=*), intent(in) :: name
        integer(c_int), intent(in), target :: n
        real(c_double), intent(in), target, contiguous :: a(:, :), b(:, :)
        real(c_double), intent(inout), target, contiguous :: c(:, :)
        integer(c_int) :: result
        result = by_name(name, [c_loc(n), c_loc(a), c_loc(b), c_loc(c)])
    end function

    function ninf_a_n_ipvt(name, a, n, ipvt) result(result)
        character(len=*), intent(in) :: name
        real(c_double), intent(inout), target, contiguous :: a(:, :)
        integer(c_int), intent(in), target :: n
        integer(c_int), intent(inout), target, contiguous :: ipvt(:)
        integer(c_int) :: result
        result = by_name(name, [c_loc(a), c_loc(n), c_loc(ipvt)])
    end function

    function ninf_a_n_ipvt_b(name, a, n, ipvt, b) result(result)
        character(len=*), intent(in) :: name
        real(c_double), intent(inout), target, contiguous :: a(:, :)
        integer(c_int), intent(in), target :: n
        integer(c_int), intent(inout), target, contiguous :: ipvt(:)
        real(c_double), intent(inout), target, contiguous :: b(:)
        integer(c_int) :: result
        result = by_name(name, [c_loc(a), c_loc(n), c_loc(ipvt), c_loc(b)])
    end function

    function ninf_n_x_y_r(name, n, x, y, r) result(result)
        character(len=*), intent(in) :: name
        integer(c_int), intent(in), target :: n
        real(c_double), intent(in), target, contiguous :: x(:), y(:)
        real(c_double), intent(inout), target, contiguous :: r(:)
        integer(c_int) :: result
        result = by_name(name, [c_loc(n), c_loc(x), c_loc(y), c_loc(r)])
    end function

    function ninf_n_x_r(name, n, x, r) result(result)
        character(len=*), intent(in) :: name
        integer(c_int), intent(in), target :: n
        real(c_double), intent(in), target, contiguous :: x(:)
        real(c_double), intent(inout), target, contiguous :: r(:)
        integer(c_int) :: result
        result = by_name(name, [c_loc(n), c_loc(x), c_loc(r)])
    end function

    function by_name(name, args) result(result)
        character(len=*), intent(in) :: name
        type(c_ptr), intent(in) :: args(:)
        integer(c_int) :: result
        type(c_ptr) :: handle
        handle = named(name)
        if (.not. c_associated(handle)) then
            result = NINF_ERROR
            return
        end if
        result = ninf_result(call_pointers(handle, args))
    end function
end module ninf
